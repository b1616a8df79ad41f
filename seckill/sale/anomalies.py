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
        parts.append(f"live counter {m.redis_drift:+d} unit(s)")
    if m.db_drift:
        parts.append(f"shop's records {m.db_drift:+d} unit(s)")
    if m.reserve_drift:
        parts.append(f"outage reserve {m.reserve_drift:+d} unit(s)")
    return ", ".join(parts) or None


def anomaly_stock_rederive(*, anomaly: AnomalyOrder, by, note: str = "") -> dict:
    """Fix a drift: derive the activity's Redis stock from the database again (a forced
    warm-up), reconcile, and record what changed in the anomaly's history. The anomaly
    stays open: staff resolve it once the result is right."""
    if anomaly.kind != AnomalyOrder.Kind.DRIFT:
        raise AnomalyActionError("only units not accounted for are fixed by recounting the live counter")
    before = reconciliation_measure(activity_id=anomaly.activity_id)
    if before.redis.stock is None:
        raise AnomalyActionError("the sale's stock is not loaded (not ready yet, or closed): nothing to recount")
    try:
        warmed = activity_warmup(activity_id=anomaly.activity_id, force=True)
    except WarmupError as exc:
        raise AnomalyActionError(f"the live counter could not be recounted: {exc}") from exc
    try:
        report = reconcile(activity_id=anomaly.activity_id)
    except RuntimeError as exc:  # another run holds the lock: the warm-up stands, say so
        result = f"live counter recounted: units left {before.redis.stock} → {warmed.remaining}; not checked: {exc}"
        anomaly_log(anomaly=anomaly, action="rederive_stock", by=by, note=note, result=result)
        raise AnomalyActionError(f"{result} (check again later)") from exc
    effect = {
        "remaining_before": before.redis.stock,
        "remaining_after": report["redis_remaining"],
        "warmed_remaining": warmed.remaining,
        "redis_drift_before": before.redis_drift,
        "redis_drift_after": report["redis_drift"],
        "identity_ok": report["identity_ok"],
    }
    result = (
        f"live counter recounted: units left {before.redis.stock} → {report['redis_remaining']}, "
        f"units off {before.redis_drift} → {report['redis_drift']}; "
        f"{'every unit accounted for' if report['identity_ok'] else 'some units still not accounted for'}"
    )
    anomaly_log(anomaly=anomaly, action="rederive_stock", by=by, note=note, result=result)
    return effect


def register() -> None:
    anomaly_repair_register(action="rederive", service=anomaly_stock_rederive, drift_probe=anomaly_drift_measured)
