"""Payments: deadlines, throttles and notifications.

Declared here, read through config/settings/registry.py (the one table)."""

from ..schema import AT_LEAST_ONE, POSITIVE, Group, Kind, Setting

GROUPS: tuple[Group, ...] = (
    Group(
        title="Payments",
        about=(
            "Deadlines, throttles and notifications. The provider itself (`PAYMENT_PROVIDER`, `PAYMENT_HOST`, "
            "`STRIPE_*`…) is set in .env.example and checked by config/settings/production.py."
        ),
        settings=(
            Setting(
                name="SECKILL_DEFAULT_PAY_TIMEOUT",
                kind=Kind.INT,
                default=15 * 60,
                bound=AT_LEAST_ONE,
                meaning="Seconds a shopper has to pay, for new activities (each keeps its own).",
            ),
            Setting(
                name="SECKILL_EXPIRY_SWEEP_INTERVAL",
                kind=Kind.FLOAT,
                default=30.0,
                bound=POSITIVE,
                meaning=(
                    "Seconds between beat's sweeps of pending orders past their deadline (the deadline tasks' safety "
                    "net)."
                ),
            ),
            Setting(
                name="SECKILL_PAY_RATE_PER_USER",
                kind=Kind.RATE,
                default="20/m",
                meaning=(
                    "A shopper's pay calls, API and pages (off with all throttles: `DJANGO_THROTTLES_ENABLED=false`)."
                ),
            ),
            Setting(
                name="SECKILL_CANCEL_RATE_PER_USER",
                kind=Kind.RATE,
                default="20/m",
                meaning="A shopper's cancel calls, API and pages.",
            ),
            Setting(name="PAYMENT_CURRENCY", kind=Kind.STR, default="CNY", meaning="The currency of payments."),
            Setting(
                name="PAYMENT_NOTIFICATION_WINDOW",
                kind=Kind.INT,
                default=300,
                bound=AT_LEAST_ONE,
                meaning="Seconds a payment notification's time may be off before it is refused (replays).",
            ),
            Setting(
                name="PAYMENT_RETRY_AFTER",
                kind=Kind.INT,
                default=30,
                bound=AT_LEAST_ONE,
                meaning="Retry-After (seconds) of the 503 payments_unavailable answered when the provider fails.",
            ),
        ),
    ),
)
