"""Staff actions on anomalies that need the flash-sale layer (the warm-up): registered
with orders.services at start-up, since orders may not import seckill."""

from orders.models import AnomalyOrder
from orders.services.anomaly_actions import AnomalyActionError, anomaly_log, anomaly_repair_register
from seckill.sale.lifecycle import WarmupError, activity_warmup
from seckill.sale.reconciliation import reconcile, reconciliation_measure


def anomaly_drift_measured(activity_id: int) -> str | None:
    """The drift still measured on the activity, in words; None when there is none."""
    m = reconciliation_measure(activity_id=activity_id)
    parts = []
    if m.redis_drift:
        parts.append(f"Redis {m.redis_drift:+d} unit(s)")
    if m.db_drift:
        parts.append(f"database {m.db_drift:+d} unit(s)")
    if m.reserve_drift:
        parts.append(f"reserve {m.reserve_drift:+d} unit(s)")
    return ", ".join(parts) or None


def anomaly_stock_rederive(*, anomaly: AnomalyOrder, by, note: str = "") -> dict:
    """Fix a drift: derive the activity's Redis stock from the database again (a forced
    warm-up), reconcile, and record what changed in the anomaly's history. The anomaly
    stays open: staff resolve it once the result is right."""
    if anomaly.kind != AnomalyOrder.Kind.DRIFT:
        raise AnomalyActionError("only a stock drift is fixed by deriving the stock again")
    before = reconciliation_measure(activity_id=anomaly.activity_id)
    if before.redis.stock is None:
        raise AnomalyActionError("the sale has no stock in Redis (not warmed yet, or closed): nothing to derive")
    try:
        warmed = activity_warmup(activity_id=anomaly.activity_id, force=True)
    except WarmupError as exc:
        raise AnomalyActionError(f"the stock could not be derived again: {exc}") from exc
    try:
        report = reconcile(activity_id=anomaly.activity_id)
    except RuntimeError as exc:  # another run holds the lock: the warm-up stands, say so
        result = (
            f"stock derived again: Redis remaining {before.redis.stock} → {warmed.remaining}; not reconciled: {exc}"
        )
        anomaly_log(anomaly=anomaly, action="rederive_stock", by=by, note=note, result=result)
        raise AnomalyActionError(f"{result} (reconcile again later)") from exc
    effect = {
        "remaining_before": before.redis.stock,
        "remaining_after": report["redis_remaining"],
        "warmed_remaining": warmed.remaining,
        "redis_drift_before": before.redis_drift,
        "redis_drift_after": report["redis_drift"],
        "identity_ok": report["identity_ok"],
    }
    result = (
        f"stock derived again: Redis remaining {before.redis.stock} → {report['redis_remaining']}, "
        f"drift {before.redis_drift} → {report['redis_drift']}; "
        f"reconciliation {'balances' if report['identity_ok'] else 'still does not balance'}"
    )
    anomaly_log(anomaly=anomaly, action="rederive_stock", by=by, note=note, result=result)
    return effect


def register() -> None:
    anomaly_repair_register(action="rederive", service=anomaly_stock_rederive, drift_probe=anomaly_drift_measured)
