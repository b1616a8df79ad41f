"""Race B: a forced re-warm between a cancel's commit and its Redis return.

The cancel's Redis return runs right after its commit (``transaction.on_commit``). This
test holds that hook back (the test's own transaction stands in for "committed, hook
not yet run"), runs the re-warm, then lets the hook run: the real services in the racy
order. Not a transactional test, for that reason.
"""

import pytest

from inventory.models import SeckillStock
from orders.services.lifecycle import order_cancel
from seckill.sale.lifecycle import activity_warmup
from seckill.sale.reconciliation import reconcile
from seckill.sale.selectors import redis_remaining

from ..factories import make_activity, make_users
from .helpers import buy

pytestmark = pytest.mark.django_db


def test_a_forced_rewarm_before_a_cancels_redis_return_counts_the_returned_units_once(
    django_capture_on_commit_callbacks,
):
    activity = make_activity(stock=5)
    cancelled, _ = buy(activity, make_users(2))
    assert redis_remaining(activity.pk) == 3

    with django_capture_on_commit_callbacks(execute=False) as after_commit:
        order_cancel(order=cancelled, reason="shopper")
    assert after_commit  # the Redis return, held back
    activity_warmup(activity_id=activity.pk, force=True)  # derives from the database: 4 available
    for hook in after_commit:
        hook()  # the cancel's Redis return runs now

    assert SeckillStock.objects.get(activity=activity).available == 4
    assert redis_remaining(activity.pk) == 4  # not 5: the returned unit is counted once
    report = reconcile(activity_id=activity.pk)
    assert report["identity_ok"], report
