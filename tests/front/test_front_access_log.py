"""nginx's access log (deploy/nginx/shop.conf, ``$shop_log_request``): every request a
line, but for the polls that went well — the sale's flag, the waiting room's status, a
purchase's result, the health probes — which every shopper's page asks every second."""

from ..helpers import wait_until
from .support import request


def test_the_polls_that_went_well_are_not_in_the_access_log(front, process_logs):
    polls = ["/api/activities/7/flag", "/api/activities/7/room", "/api/activities/7/result", "/seckill/7/flag.js"]
    for path in [*polls, "/api/ping", "/healthz"]:
        assert request(front, "GET", path).status == 200
    assert request(front, "GET", "/api/activities/7/room/join").status == 200
    assert request(front, "GET", "/api/activities/?the-last-one").status == 200

    log = process_logs / "nginx-access.log"
    wait_until(lambda: "the-last-one" in log.read_text(), timeout=10, what="the last request's line")
    lines = log.read_text().splitlines()
    assert len(lines) == 2, lines
    assert '"GET /api/activities/7/room/join HTTP/1.1" 200' in lines[0]
