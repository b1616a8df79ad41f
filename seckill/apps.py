from django.apps import AppConfig
from django.conf import settings
from django.core import checks


class SeckillConfig(AppConfig):
    name = "seckill"
    verbose_name = "Flash sales"

    def ready(self):
        from . import authentication  # noqa: F401 - connects the shared token cache's signals

        checks.register(rates_check)


def rates_check(app_configs=None, **kwargs) -> list:
    """SECKILL_RATE_PER_USER / _PER_IP come from the environment: a typo must stop the
    start-up with a message, not answer 500 on every purchase."""
    from .models import RATE_RE

    return [
        checks.Error(
            f"{name}={value!r} is not a rate",
            hint='Use a rate such as "10/s", "600/m" or "100/5m", or "off".',
            id="seckill.E001",
        )
        for name in ("SECKILL_RATE_PER_USER", "SECKILL_RATE_PER_IP")
        if (value := getattr(settings, name)) and value != "off" and not RATE_RE.match(value)
    ]
