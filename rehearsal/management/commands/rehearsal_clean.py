import json

from django.core.management.base import BaseCommand

from rehearsal.data import clean


class Command(BaseCommand):
    help = (
        "Remove every rehearsal sale (its Redis keys, orders and payments) and every rehearsal account. "
        "Only data carrying the rehearsal's tags is touched: never a real sale."
    )

    def handle(self, *args, **o):
        self.stdout.write(json.dumps(clean()))
