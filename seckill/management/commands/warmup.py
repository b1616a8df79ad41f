import json

import redis
from django.core.management.base import BaseCommand, CommandError

from seckill.models import Activity
from seckill.sale.lifecycle import WarmupError, activity_warmup


class Command(BaseCommand):
    help = "Load an activity's stock into Redis and check it against the database."

    def add_arguments(self, parser):
        parser.add_argument("activity_id", type=int)
        parser.add_argument(
            "--force",
            action="store_true",
            help="overwrite a live activity's stock, derived from the database and the log",
        )

    def handle(self, *args, activity_id, force, **options):
        try:
            result = activity_warmup(activity_id=activity_id, force=force)
        except Activity.DoesNotExist as exc:
            raise CommandError(f"no activity {activity_id}") from exc
        except WarmupError as exc:
            raise CommandError(str(exc)) from exc
        except redis.RedisError as exc:
            raise CommandError(f"Redis is not reachable ({exc}); check REDIS_URL / SECKILL_REDIS_URL") from exc
        self.stdout.write(json.dumps(result.as_dict()))
