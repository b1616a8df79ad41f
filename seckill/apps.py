from django.apps import AppConfig
from django.conf import settings
from django.core import checks
from django.core.exceptions import ValidationError


class SeckillConfig(AppConfig):
    name = "seckill"
    verbose_name = "Flash sales"

    def ready(self):
        from core.safety import deploy_safety_check
        from seckill.purchase import token_cache  # noqa: F401 - connects the shared token cache's signals
        from seckill.sale import anomalies
        from seckill.sale.snapshot import activity_shards
        from stock.layout import shards_lookup_register

        shards_lookup_register(activity_shards)
        anomalies.register()  # the drift re-derive, for orders' anomaly actions
        checks.register(rates_check)
        checks.register(deploy_safety_check)


def rates_check(app_configs=None, **kwargs) -> list:
    """SECKILL_RATE_PER_USER, _PER_IP and SECKILL_AUTH_FAILURES_PER_IP come from the
    environment: a typo must stop the start-up with a message, not answer 500 on every
    request."""
    from seckill.models import validate_rate  # the admin's check of an activity's own rates

    errors = []
    for name in ("SECKILL_RATE_PER_USER", "SECKILL_RATE_PER_IP", "SECKILL_AUTH_FAILURES_PER_IP"):
        value = getattr(settings, name)
        try:
            validate_rate(value)
        except ValidationError:
            errors.append(
                checks.Error(
                    f"{name}={value!r} is not a rate",
                    hint='Use a rate such as "10/s", "600/m" or "100/5m", or "off".',
                    id="seckill.E001",
                )
            )
    return errors
