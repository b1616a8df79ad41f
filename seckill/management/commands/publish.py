import json

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from seckill.models import Activity
from seckill.sale.pages import activity_page_publish


class Command(BaseCommand):
    help = (
        "Render activity pages to static files (every language) for a CDN origin, under "
        "SECKILL_PUBLISH_DIR or --dir. Without ids: every activity that has not ended."
    )

    def add_arguments(self, parser):
        parser.add_argument("activity_ids", nargs="*", type=int)
        parser.add_argument("--dir", default=None, help=f"output directory (default {settings.SECKILL_PUBLISH_DIR})")

    def handle(self, *args, activity_ids, dir, **options):
        ids = activity_ids or list(
            Activity.objects.exclude(status=Activity.Status.ENDED).order_by("pk").values_list("pk", flat=True)
        )
        written = {}
        for activity_id in ids:
            try:
                written[activity_id] = [str(p) for p in activity_page_publish(activity_id=activity_id, directory=dir)]
            except Activity.DoesNotExist as exc:
                raise CommandError(f"no activity {activity_id}") from exc
        self.stdout.write(json.dumps({"published": written}))
