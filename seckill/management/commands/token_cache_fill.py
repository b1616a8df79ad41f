import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from seckill.purchase.token_cache import TokenFillRunning, token_filter_params, token_shared_fill


class Command(BaseCommand):
    help = (
        "Put every active shopper's API token in the cache Redis shared by the web processes, "
        "so a flash crowd's first requests need no database lookup, and rebuild the token "
        "filter that refuses made-up tokens there. Run it before a big sale."
    )

    def handle(self, *args, **options):
        def progress(done: int) -> None:
            self.stderr.write(f"\r{done:,} tokens cached…", ending="")
            self.stderr.flush()

        try:
            done = token_shared_fill(progress=progress)
        except redis.RedisError as exc:
            raise CommandError(f"Redis is not reachable ({exc}); check REDIS_URL") from exc
        except TokenFillRunning:
            raise CommandError(
                "another token fill is running (beat's automatic one or another operator's); "
                "it does the same: wait for it to end"
            ) from None
        self.stderr.write("")
        self.stdout.write(f"{done} tokens cached for {settings.SECKILL_TOKEN_SHARED_TTL} s (SECKILL_TOKEN_SHARED_TTL)")
        bits, hashes = token_filter_params()
        self.stdout.write(
            f"token filter rebuilt: {bits:,} bits ({bits / 8 / 2**20:.1f} MiB), {hashes} hashes, "
            f"false positives {settings.SECKILL_TOKEN_FILTER_ERROR_RATE:g} (SECKILL_TOKEN_FILTER_ERROR_RATE)"
        )
