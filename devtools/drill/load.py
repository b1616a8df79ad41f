"""The load, run on the client host: ``python -m devtools.drill.load SPEC HISTORY``.

SPEC (JSON): the activity id, its purchase token, the web hosts' base URLs, the shoppers
(``[user id, API token]``), the trickle (how many shoppers arrive one by one over how many
seconds: the sale is going on while the fault lasts) and the flood (everyone else at once).
Shopper i starts on web host i mod 2 (the client spreads the load, no balancer); an answer
503, 429 or no answer at all makes the shopper try again on the other host after its
``Retry-After``, 403 ``not_started`` after 0.2 s (at most ``retries`` more times). Every
request and answer is one JSON line of HISTORY: shopper, host, attempt, time sent, time
answered (Unix seconds), status, code, reservation id (0 / "error" when no answer came).
"""

from __future__ import annotations

import http.client
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

_local = threading.local()


def _connection(base: str, timeout: float) -> http.client.HTTPConnection:
    pool = getattr(_local, "pool", None)
    if pool is None:
        pool = _local.pool = {}
    conn = pool.get(base)
    if conn is None:
        parts = urlsplit(base)
        conn = pool[base] = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)
    return conn


def _drop(base: str) -> None:
    conn = _local.pool.pop(base, None)
    if conn is not None:
        conn.close()


def request(base: str, method: str, path: str, key: str, body: dict | None, timeout: float = 10.0):
    """(status, JSON body, Retry-After) over this thread's keep-alive connection to base;
    (0, {"code": "error", ...}, 1) when no answer came."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": f"Token {key}", "Content-Type": "application/json"}
    for attempt in (0, 1):  # a kept-alive connection the server closed meanwhile: once more on a new one
        conn = _connection(base, timeout)
        try:
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            raw = response.read()
            try:
                answer = json.loads(raw or b"null") or {}
            except ValueError:
                answer = {"code": f"non-json:{raw[:40]!r}"}
            return response.status, answer, float(response.getheader("Retry-After") or 1)
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
            _drop(base)
            if attempt:
                return 0, {"code": "error", "detail": type(exc).__name__}, 1.0
        except OSError as exc:  # timeout, refused, unreachable
            _drop(base)
            return 0, {"code": "error", "detail": type(exc).__name__}, 1.0
    return 0, {"code": "error"}, 1.0


class History:
    def __init__(self, path: str):
        self._file = open(path, "a", buffering=1)
        self._lock = threading.Lock()

    def write(self, record: dict) -> None:
        line = json.dumps(record)
        with self._lock:
            self._file.write(line + "\n")

    def close(self) -> None:
        self._file.close()


def shop(spec: dict, history: History, index: int, user_id: int, key: str) -> None:
    webs = spec["webs"]
    path = f"/api/activities/{spec['activity']}/purchase"
    for attempt in range(spec.get("retries", 3) + 1):
        base = webs[(index + attempt) % len(webs)]
        sent = time.time()
        status, answer, retry_after = request(base, "POST", path, key, {"token": spec["token"]})
        history.write(
            {
                "shopper": user_id,
                "host": base,
                "attempt": attempt,
                "sent": sent,
                "answered": time.time(),
                "status": status,
                "code": answer.get("code", ""),
                "reservation": answer.get("reservation", ""),
            }
        )
        if answer.get("code") == "not_started":  # the flag opened on another host first: soon
            time.sleep(0.2)
            continue
        if status not in (0, 429, 503):
            return
        time.sleep(min(retry_after, 2.0))


def run(spec: dict, history_path: str) -> None:
    history = History(history_path)
    shoppers = spec["shoppers"]
    trickle = min(spec["trickle"], len(shoppers))
    with ThreadPoolExecutor(max_workers=spec.get("threads", 32)) as pool:
        start = time.monotonic()
        futures = []
        for i in range(trickle):  # one by one over the trickle's seconds
            due = start + spec["trickle_seconds"] * i / max(trickle, 1)
            pause = due - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            futures.append(pool.submit(shop, spec, history, i, *shoppers[i]))
        for f in futures:
            f.result()
        mark = time.time()
        history.write({"flood_start": mark})
        for f in [pool.submit(shop, spec, history, i, *shoppers[i]) for i in range(trickle, len(shoppers))]:
            f.result()
        history.write({"flood_end": time.time()})
    history.close()


if __name__ == "__main__":
    with open(sys.argv[1]) as spec_file:
        run(json.load(spec_file), sys.argv[2])
