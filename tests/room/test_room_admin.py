"""The waiting room in admin: its settings on the form, its figures on the change page, and
the pause and resume actions."""

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from seckill.models import Activity
from seckill.room.status import room_status

from ..factories import make_users, token_of
from ..helpers import form_data, wait_until
from .conftest import room_sale, snapshot_of

pytestmark = pytest.mark.django_db(transaction=True)


def test_admin_sets_up_a_room_shows_its_figures_and_pauses_it(admin_client):
    created = admin_client.post(
        "/admin/seckill/activity/add/",
        form_data(
            admission_mode="room", room_prequeue_minutes="20", room_rate="50", room_cap="100", room_window_seconds="90"
        ),
    )
    assert created.status_code == 302, created.content.decode()[:2000]
    made = Activity.objects.get()
    assert (made.admission_mode, made.room_prequeue_minutes, made.room_rate, made.room_cap) == ("room", 20, 50, 100)
    # A form posted without the room's fields (an older page) keeps the defaults.
    assert admin_client.post("/admin/seckill/activity/add/", form_data(title="Plain")).status_code == 302
    assert Activity.objects.get(title="Plain").admission_mode == "direct"

    activity = room_sale(stock=5, room_rate=1000)
    shoppers = make_users(3, prefix="adm")
    for shopper in shoppers:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {token_of(shopper)}")
        assert client.post(f"/api/activities/{activity.pk}/room/join").status_code == 200
    wait_until(
        lambda: room_status(snapshot_of(activity), now=timezone.now(), fresh=True).now_serving == 3,
        timeout=10,
        what="admissions",
    )
    page = admin_client.get(f"/admin/seckill/activity/{activity.pk}/change/").content.decode()
    for words in ("Room figures", "let in", "no-shows", "closed at", "seed"):
        assert words in page
    assert Activity.objects.get(pk=activity.pk).room_seed in page

    changelist = "/admin/seckill/activity/"
    admin_client.post(changelist, {"action": "pause_room", "_selected_action": [activity.pk]})
    assert room_status(snapshot_of(activity), now=timezone.now(), fresh=True).state == "paused"
    admin_client.post(changelist, {"action": "resume_room", "_selected_action": [activity.pk]})
    assert room_status(snapshot_of(activity), now=timezone.now(), fresh=True).state == "open"
