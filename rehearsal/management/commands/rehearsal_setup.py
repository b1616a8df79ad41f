import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from rehearsal.data import SaleSpec, rehearsal_admin_create, run_name, sale_create, shoppers_create


class Command(BaseCommand):
    help = (
        "Make a rehearsal: its own admin account, N shoppers with API tokens (one a line in --tokens-file) "
        "and a rehearsal sale (create_activity, warmed). Everything is tagged as rehearsal data and removed by "
        'rehearsal_clean. Prints {"activity", "admin", "password", "tokens_file", "shoppers"} as JSON.'
    )

    def add_arguments(self, parser):
        parser.add_argument("--shoppers", type=int, required=True)
        parser.add_argument("--units", type=int, required=True)
        parser.add_argument("--start-in", type=int, default=60, help="seconds from now to the sale's start")
        parser.add_argument("--admission", choices=["direct", "room"], default="direct")
        parser.add_argument("--pay-timeout", type=int, default=60, help="seconds to pay (short: expiries are seen)")
        parser.add_argument("--room-rate", type=int, default=100, help="shoppers the room lets in per second")
        parser.add_argument("--room-cap", type=int, default=300)
        parser.add_argument("--room-window", type=int, default=60, help="seconds to buy once let in")
        parser.add_argument("--tokens-file", required=True, help="where the shoppers' API tokens are written")

    def handle(self, *args, **o):
        if o["shoppers"] < 1 or o["units"] < 1:
            raise CommandError("--shoppers and --units must be at least 1")
        if o["start_in"] < 5:
            raise CommandError("--start-in must be at least 5 seconds: the shoppers arrive before the start")
        name = run_name()
        username, password = rehearsal_admin_create(name)
        count = shoppers_create(name, o["shoppers"], Path(o["tokens_file"]))
        spec = SaleSpec(
            units=o["units"],
            start_in=o["start_in"],
            admission=o["admission"],
            pay_timeout=o["pay_timeout"],
            room_rate=o["room_rate"],
            room_cap=o["room_cap"],
            room_window=o["room_window"],
        )
        activity_id = sale_create(name, spec, owner=username)
        summary = {
            "activity": activity_id,
            "admin": username,
            "password": password,
            "tokens_file": o["tokens_file"],
            "shoppers": count,
        }
        self.stdout.write(json.dumps(summary))
