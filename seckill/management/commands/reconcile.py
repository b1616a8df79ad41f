import json

from django.core.management.base import BaseCommand, CommandError

from seckill.models import Activity
from seckill.sale.reconciliation import reconcile
from seckill.sale.snapshot import live_activities


class Command(BaseCommand):
    help = (
        "Reconcile now: check the stock identities, act on every bucket (create missing orders, cancel "
        "overdue ones, return stock, open anomalies) and store the report. Without an id, every live activity."
    )

    def add_arguments(self, parser):
        parser.add_argument("activity_id", type=int, nargs="?")
        parser.add_argument("--json", action="store_true", help="print the report as JSON")
        parser.add_argument("--dry-run", action="store_true", help="only report: change nothing, store nothing")

    def handle(self, *args, activity_id=None, **options):
        dry_run = options["dry_run"]
        reports: dict | list[dict]
        if activity_id is not None:
            if not Activity.objects.filter(pk=activity_id).exists():
                raise CommandError(f"no activity {activity_id}")
            reports = reconcile(activity_id=activity_id, dry_run=dry_run)
        else:
            reports = [
                reconcile(activity_id=a, dry_run=dry_run) for a in live_activities().values_list("pk", flat=True)
            ]
        if options["json"]:
            self.stdout.write(json.dumps(reports, default=str))
            return
        for report in reports if isinstance(reports, list) else [reports]:
            ok = "OK" if report["identity_ok"] else "DRIFT"
            if not report["consistent"]:
                ok = "NOT MEASURED (the sale kept moving; run it again)"
            self.stdout.write(
                f"activity {report['activity']}: {ok}{' (dry run)' if dry_run else ''} — Redis loaded "
                f"{report['redis_loaded']}, remaining {report['redis_remaining']}, reserved-not-ordered "
                f"{report['reserved_not_ordered']}; DB total {report['db_total']}, available {report['db_available']}; "
                f"units pending {report['units_pending']}, paid {report['units_paid']}, cancelled "
                f"{report['units_cancelled']}; drift Redis {report['redis_drift']}, DB {report['db_drift']}; "
                f"buckets {report['buckets']}; actions {report['actions']}; "
                f"anomalies opened {report['anomalies_opened']}"
            )
