"""The waiting room on a real three-master Redis Cluster: every room script touches the
activity's one slot (its hash tag), from the join to the close."""

import pytest
import redis
from django.utils import timezone

from seckill.sale.activities import activity_token_ensure
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis

from ..factories import make_users
from .conftest import room_sale, snapshot_of
from .test_tickets import admitted_ticket, buy, client_of

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_join_draw_admit_buy_and_close_on_the_cluster(on_cluster):
    from seckill.room.status import room_status

    client = stock_redis()
    assert isinstance(client, redis.RedisCluster)
    activity = room_sale(stock=2)
    shoppers = make_users(3, prefix="cluster-room")
    clients = [client_of(u) for u in shoppers]
    token = activity_token_ensure(activity_id=activity.pk)
    for c in clients[:2]:
        assert buy(activity, c, token, ticket=admitted_ticket(activity, c)).status_code == 202
    assert clients[2].post(f"/api/activities/{activity.pk}/room/join").json()["place"] == 3
    closed = room_status(snapshot_of(activity), now=timezone.now(), fresh=True)
    assert (closed.state, closed.sold_out, closed.now_serving) == ("closed", True, 2)
    keys = ActivityKeys(activity.pk)
    assert {client.get_node_from_key(k).name for k in (keys.stock, keys.room_state, keys.room_queue)} == {
        client.get_node_from_key(keys.stock).name
    }
