"""The waiting room's endpoints are in the OpenAPI schema, with the purchase body's ticket."""

import pytest


@pytest.mark.django_db
def test_the_room_endpoints_are_in_the_schema(client):
    schema = client.get("/api/schema/?format=json").json()
    paths = schema["paths"]
    for path, method, operation in [
        ("/api/activities/{activity_id}/room", "get", "room_status"),
        ("/api/activities/{activity_id}/room/join", "post", "room_join"),
        ("/api/activities/{activity_id}/room/ticket", "post", "room_ticket"),
        ("/api/activities/{activity_id}/room/draw", "get", "room_draw"),
    ]:
        assert paths[path][method]["operationId"] == operation
    assert "ticket" in schema["components"]["schemas"]["PurchaseRequest"]["properties"]
    assert "403" in paths["/api/activities/{activity_id}/room/ticket"]["post"]["responses"]


@pytest.mark.django_db
def test_the_room_page_is_the_same_for_everyone_and_speaks_both_languages(client):
    from tests.factories import make_activity

    from .conftest import room_sale

    activity = room_sale(stock=3)
    page = client.get(f"/seckill/{activity.pk}/room/")
    assert page.status_code == 200
    assert "public" in page["Cache-Control"] and page.has_header("ETag")
    assert not page.cookies and "Cookie" not in page.get("Vary", "")
    assert "Join the queue" in page.content.decode()
    chinese = client.get(f"/zh-hans/seckill/{activity.pk}/room/")
    assert chinese.status_code == 200 and "排队" in chinese.content.decode()
    again = client.get(f"/seckill/{activity.pk}/room/", HTTP_IF_NONE_MATCH=page["ETag"])
    assert again.status_code == 304
    direct = make_activity(stock=1)
    assert client.get(f"/seckill/{direct.pk}/room/").status_code == 404


@pytest.mark.django_db
def test_the_sale_page_of_a_room_sale_leads_to_the_room(client):
    from tests.factories import make_activity

    from .conftest import room_sale

    activity = room_sale(stock=3)
    page = client.get(f"/seckill/{activity.pk}/").content.decode()
    assert f'href="/seckill/{activity.pk}/room/"' in page
    chinese = client.get(f"/zh-hans/seckill/{activity.pk}/").content.decode()
    assert f'href="/zh-hans/seckill/{activity.pk}/room/"' in chinese and "排队室" in chinese
    assert "room-link" not in client.get(f"/seckill/{make_activity(stock=1).pk}/").content.decode()
