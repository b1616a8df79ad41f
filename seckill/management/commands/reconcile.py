import json

from django.core.management.base import BaseCommand, CommandError

from seckill.models import Activity
from seckill.reconciliation import reconcile
from seckill.selectors import live_activities


class Command(BaseCommand):
    help = "Check the stock identities now; without an id, every live activity."

    def add_arguments(self, parser):
        parser.add_argument("activity_id", type=int, nargs="?")
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def handle(self, *args, activity_id=None, **options):
        if activity_id is not None:
            if not Activity.objects.filter(pk=activity_id).exists():
                raise CommandError(f"no activity {activity_id}")
            reports = reconcile(activity_id=activity_id)
        else:
            reports = [reconcile(activity_id=a) for a in live_activities().values_list("pk", flat=True)]
        if options["json"]:
            self.stdout.write(json.dumps(reports, default=str))
            return
        for report in reports if isinstance(reports, list) else [reports]:
            ok = "OK" if report["identity_ok"] else "DRIFT"
            self.stdout.write(
                f"activity {report['activity']}: {ok} — Redis loaded {report['redis_loaded']}, remaining "
                f"{report['redis_remaining']}, reserved-not-ordered {report['reserved_not_ordered']}; DB total "
                f"{report['db_total']}, available {report['db_available']}; units pending {report['units_pending']}, "
                f"paid {report['units_paid']}, cancelled {report['units_cancelled']}; buckets {report['buckets']}"
            )
