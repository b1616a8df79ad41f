"""The live view's refused purchases are its sale's own (issue 42): the purchase counter
carries the sale, through both ways in (the WSGI stacks and the ASGI front), and made-up
sale ids in a flood add no label value: they count under one, "unknown"."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from core.metrics import PURCHASES
from seckill.admin.dashboard import live_figures
from seckill.models import Activity
from seckill.sale.activities import activity_token_ensure
from seckill.sale.snapshot import activity_snapshot_forget

from ..factories import make_activity, make_users, token_of

pytestmark = pytest.mark.django_db(transaction=True)

UNKNOWN_SALE = "unknown"  # the one label value of every id that is no sale


def counted_by_sale() -> dict[str, float]:
    """The purchase answers counted so far, summed by the ``activity`` label."""
    by_sale: dict[str, float] = {}
    for metric in PURCHASES.collect():
        for sample in metric.samples:
            if sample.name.endswith("_total"):
                sale = sample.labels.get("activity")
                by_sale[sale] = by_sale.get(sale, 0) + sample.value
    return by_sale


def purchase(api_stack, activity_id: int, user=None, token: str = "made-up") -> int:  # noqa: S107 - a sale token
    headers = {"Authorization": f"Token {token_of(user)}"} if user is not None else {}
    answer = api_stack.call("POST", f"/api/activities/{activity_id}/purchase", headers=headers, body={"token": token})
    return answer["status"]


def test_a_sales_live_view_shows_its_own_refusals_only(api_stack):
    refused, quiet = make_activity(stock=1, title="Refused sale"), make_activity(stock=1, title="Quiet sale")
    token = activity_token_ensure(activity_id=refused.pk)
    winner, loser = make_users(2, prefix=f"per-sale-{api_stack.name}-")
    assert purchase(api_stack, refused.pk, winner, token) == 202
    assert purchase(api_stack, refused.pk, loser, token) == 410  # sold out
    assert purchase(api_stack, refused.pk) == 401  # not signed in

    assert live_figures(activity=refused)["refusals"]["by_code"] == {"sold_out": 1, "not_authenticated": 1}
    merchant = Client()
    merchant.force_login(get_user_model().objects.create_superuser(f"watcher-{api_stack.name}", "w@example.com", "pw"))
    figures = merchant.get(f"/admin/seckill/activity/{quiet.pk}/live.json").json()
    assert (figures["refusals"]["total"], figures["refusals"]["by_code"]) == (0, {})
    page = merchant.get(f"/admin/seckill/activity/{quiet.pk}/live/").content.decode()
    assert 'data-field="refusals.total">0<' in page


def test_made_up_sale_ids_count_under_one_label_value(api_stack):
    gone = make_activity(stock=1, started=False, warm=False, title="Deleted sale")
    real = make_activity(stock=1, title="Real sale")
    gone_id = gone.pk
    Activity.objects.filter(pk=gone_id).delete()
    activity_snapshot_forget(gone_id)
    (shopper,) = make_users(1, prefix=f"flood-{api_stack.name}-")
    made_up = [real.pk + 1000 + i for i in range(150)] + [gone_id, 9999999999999999999]
    before = counted_by_sale()

    for activity_id in made_up:
        purchase(api_stack, activity_id)  # no token
        purchase(api_stack, activity_id, shopper)

    after = counted_by_sale()
    assert set(after) - set(before) <= {UNKNOWN_SALE}, sorted(set(after) - set(before))[:10]
    assert after[UNKNOWN_SALE] - before.get(UNKNOWN_SALE, 0) == 2 * len(made_up)
    assert after.get(str(real.pk), 0) == before.get(str(real.pk), 0)
