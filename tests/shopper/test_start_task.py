"""At the start a Celery task (scheduled with eta when the activity is saved or warmed)
creates the purchase token; nothing creates it before."""

from datetime import timedelta

import pytest
from django.utils import timezone

from seckill.models import Activity
from seckill.sale.activities import activity_save
from seckill.tasks import activity_start_task
from tests.factories import make_activity
from tests.helpers import wait_until


@pytest.mark.slow
def test_the_start_task_creates_the_token_at_the_start_without_any_request(celery_worker):
    start = timezone.now() + timedelta(seconds=4)
    activity = make_activity(started=False, start_at=start, end_at=start + timedelta(hours=1))  # warmed: scheduled
    assert Activity.objects.get(pk=activity.pk).purchase_token is None
    token = wait_until(
        lambda: Activity.objects.filter(pk=activity.pk).values_list("purchase_token", flat=True).first(),
        timeout=90,
        what="the start task to create the token",
    )
    # Created by the task at (not before) the start: nothing else asked for it.
    assert timezone.now() >= start and token
    assert "activity_start_task" in celery_worker.log()


@pytest.mark.slow
def test_a_start_moved_later_is_rescheduled_and_the_early_task_does_nothing(celery_worker):
    start = timezone.now() + timedelta(seconds=3)
    # Not warmed: a warmed sale's start is locked.
    activity = make_activity(started=False, warm=False, start_at=start, end_at=start + timedelta(hours=1))
    activity.start_at = timezone.now() + timedelta(hours=1)
    activity_save(activity=activity)
    wait_until(
        lambda: any(
            "activity_start_task" in line and "succeeded" in line and line.rstrip().endswith(": False")
            for line in celery_worker.log().splitlines()
        ),
        timeout=60,
        what="the task scheduled for the old start to run and do nothing",
    )
    assert timezone.now() >= start
    assert Activity.objects.get(pk=activity.pk).purchase_token is None


@pytest.mark.django_db
def test_the_task_before_the_start_creates_nothing():
    activity = make_activity(started=False)
    assert activity_start_task.apply(args=[activity.pk]).get() is False
    assert activity_start_task.apply(args=[987654]).get() is False
    assert Activity.objects.get(pk=activity.pk).purchase_token is None
