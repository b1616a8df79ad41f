"""The front door's own rules, through the real nginx and the repository's configuration
(deploy/nginx/shop.conf), in front of a stand-in upstream that records what nginx
forwards: the forwarding headers, what never reaches the app (underscored names, slow or
oversized requests), the caps on headers, bodies and connections per address, and the
contract's JSON error wherever nginx refuses."""

import re
import socket
import threading
import time

import pytest

from ..helpers import wait_until
from .support import assert_json_error, port_of, raw, read_answer, request

pytestmark = pytest.mark.slow  # real nginx processes

KIB = 1024


def test_the_app_gets_nginxs_forwarding_headers_and_none_of_the_clients(front, upstream):
    answer = request(
        front,
        "GET",
        "/api/activities/",
        source="127.0.0.2",
        headers={
            "X-Forwarded-For": "203.0.113.9",
            "X_Forwarded_For": "203.0.113.10",  # one WSGI/ASGI variable with X-Forwarded-For
            "X-Forwarded-Proto": "https",
            "X-Forwarded-Host": "elsewhere.example",
            "X-Real-IP": "203.0.113.11",
            "Forwarded": "for=203.0.113.12",
            "X-Request-ID": "chosen-by-the-client",
        },
    )
    assert answer.status == 200 and answer.json()["ok"] is True
    (forwarded,) = upstream.requests
    assert forwarded.request_line == "GET /api/activities/ HTTP/1.1"
    assert forwarded.header("X-Forwarded-For") == ["127.0.0.2"]  # the address nginx saw, alone
    assert not [name for name, _ in forwarded.headers if "_" in name], forwarded.headers
    assert forwarded.header("X-Forwarded-Proto") == ["http"]
    assert forwarded.header("X-Forwarded-Host") == forwarded.header("X-Real-IP") == forwarded.header("Forwarded") == []
    (request_id,) = forwarded.header("X-Request-ID")
    assert re.fullmatch(r"[0-9a-f]{32}", request_id)
    assert forwarded.header("Host") == [f"127.0.0.1:{port_of(front)}"]  # as sent: Django's CSRF origin check
    assert answer.headers["server"] == "nginx"  # no version


def test_a_request_reaches_the_app_only_when_nginx_has_all_of_it(front, upstream):
    head = b"POST /api/activities/1/purchase HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    body = b'{"token": "' + b"t" * 86 + b'"}'
    with socket.create_connection(("127.0.0.1", port_of(front)), timeout=30) as slow:
        slow.sendall(head + b"Content-Length: %d\r\n\r\n" % len(body) + body[:40])
        # A request sent after those bytes has made the whole round trip: nginx has read them.
        assert request(front, "GET", "/api/ping").status == 200
        assert upstream.paths() == ["/api/ping"]
        slow.sendall(body[40:])
        assert read_answer(slow).status == 200
    purchase = upstream.requests[-1]
    assert purchase.request_line.startswith("POST /api/activities/1/purchase") and purchase.body == body


def test_a_client_that_stalls_is_cut_off_after_ten_seconds_and_never_reaches_the_app(front, upstream):
    port = port_of(front)
    stalled_body = socket.create_connection(("127.0.0.1", port), timeout=30)
    stalled_body.sendall(b"POST /api/ping HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\nabc")
    stalled_head = socket.create_connection(("127.0.0.1", port), timeout=30)
    stalled_head.sendall(b"GET /api/ping HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    started = time.monotonic()
    for sock in (stalled_body, stalled_head):
        with sock:
            try:
                received = sock.recv(1024)
            except ConnectionResetError:  # reset_timedout_connection
                received = b""
            assert received == b""  # closed, nothing answered
    elapsed = time.monotonic() - started
    assert 9 <= elapsed <= 20, elapsed
    assert upstream.requests == []


def test_header_and_uri_caps_answer_the_contracts_json(front, upstream):
    big = "a" * 9 * KIB
    assert request(front, "GET", "/api/ping", headers={"Cookie": "c=" + "a" * 7 * KIB}).status == 200
    assert_json_error(request(front, "GET", "/api/ping", headers={"Cookie": big}), 400, "request_header_too_large")
    many = {f"X-Part-{i}": "a" * 7 * KIB for i in range(5)}  # each fits a buffer; together over 32 KB
    assert_json_error(request(front, "GET", "/api/ping", headers=many), 400, "request_header_too_large")
    assert_json_error(request(front, "GET", "/api/ping?q=" + big), 414, "uri_too_long")
    assert upstream.paths() == ["/api/ping"]  # only the first


def test_a_body_over_one_megabyte_is_refused_before_it_is_read(front, upstream):
    refused = raw(front, b"POST /api/ping HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n" % (1024 * KIB + 1))
    assert_json_error(refused, 413, "payload_too_large")
    assert upstream.requests == []
    whole = request(front, "POST", "/api/ping", body=b"x" * 1024 * KIB)  # the cap itself passes
    assert whole.status == 200 and len(upstream.requests[-1].body) == 1024 * KIB


def test_malformed_requests_and_nginxs_own_refusals_answer_json(front, upstream):
    assert_json_error(raw(front, b"G@T / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"), 400, "bad_request")
    assert_json_error(raw(front, b"GARBAGE\r\n\r\n"), 400, "bad_request")
    assert_json_error(raw(front, b"GET / HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n"), 505, "http_version_not_supported")
    unknown_coding = b"POST /api/ping HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: gzip\r\n\r\n"
    assert_json_error(raw(front, unknown_coding), 501, "not_implemented")
    # nginx's own answers keep JSON whatever the path's extension says.
    assert_json_error(request(front, "GET", "/static/no-such-file.css"), 404, "not_found")
    # The error locations are internal: a client cannot ask for one.
    assert_json_error(request(front, "GET", "/_front/busy"), 404, "not_found")
    assert upstream.requests == []


def test_requests_in_progress_per_address_are_capped_at_256(front, upstream):
    port = port_of(front)

    def connect(source: str) -> socket.socket:
        sock = socket.socket()
        sock.settimeout(30)
        sock.bind((source, 0))
        sock.connect(("127.0.0.1", port))
        return sock

    # 256 requests in progress from one address: headers read, bodies still coming.
    held = []
    try:
        for _ in range(256):
            sock = connect("127.0.0.4")
            sock.sendall(b"POST /api/ping HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\n\r\nab")
            held.append(sock)

        def refused_once_all_are_counted():
            answer = request(front, "GET", "/api/ping", source="127.0.0.4")
            return answer if answer.status == 429 else None

        refused = wait_until(refused_once_all_are_counted, timeout=8, what="the 257th request to be refused")
        assert_json_error(refused, 429, "too_many_connections")
        assert refused.headers["retry-after"] == "1"
        for sock in held:  # none of the 256 was refused
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)
        assert request(front, "GET", "/api/ping", source="127.0.0.5").status == 200  # another address
    finally:
        for sock in held:
            sock.close()
    wait_until(
        lambda: request(front, "GET", "/api/ping", source="127.0.0.4").status == 200,
        timeout=10,
        what="the address to be let in again",
    )


def test_only_the_public_locations_cache_and_only_what_the_app_marks_public(front, upstream):
    public = ("Cache-Control", "public, max-age=0, s-maxage=300")
    upstream.answer("/seckill/1/", public)  # s-maxage, not max-age, for a shared cache
    upstream.answer("/seckill/2/", public, ("Set-Cookie", "sessionid=abc"))
    upstream.answer("/seckill/3/", ("Cache-Control", "private, max-age=300"))
    upstream.answer("/seckill/4/", ("Cache-Control", "no-store"))
    upstream.answer("/api/activities/1/", ("Cache-Control", "public, max-age=300"))  # not a cached location
    upstream.answer("/seckill/1/flag.js", ("Cache-Control", "public, max-age=300"))
    for path in upstream.answers:
        first, second = request(front, "GET", path), request(front, "GET", path)
        cached = path == "/seckill/1/"
        assert (second.body == first.body) is cached, path
        assert second.headers.get("x-cache-status") == ("HIT" if cached else first.headers.get("x-cache-status"))
    assert upstream.paths().count("/seckill/1/") == 1
    assert request(front, "POST", "/seckill/1/", body=b"{}").json()["n"] > 1  # a POST is never a cached answer


def test_a_crowd_asking_for_an_uncached_page_reaches_the_app_once(front, upstream):
    upstream.answer("/seckill/5/", ("Cache-Control", "public, max-age=30, s-maxage=300"), delay=0.5)
    answers = []

    def ask():
        answers.append(request(front, "GET", "/seckill/5/"))

    crowd = [threading.Thread(target=ask) for _ in range(20)]
    for thread in crowd:
        thread.start()
    for thread in crowd:
        thread.join(60)
    assert len(answers) == 20 and all(a.status == 200 for a in answers)
    # One request fills the entry; the others wait for it (proxy_cache_lock) and get it.
    assert upstream.paths() == ["/seckill/5/"]
    assert sorted(a.headers["x-cache-status"] for a in answers) == ["HIT"] * 19 + ["MISS"]
    assert len({a.body for a in answers}) == 1
