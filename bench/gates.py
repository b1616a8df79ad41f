"""Benchmark of the traffic gates: what a rejection costs next to the bare JSON view.

    .venv/bin/python -m bench.gates [--seconds 10] [--connections 50] [--workers 4]

One run, one gunicorn (production settings, sync workers), one wrk (2 threads, keep-alive
as gunicorn allows), each scenario in turn, the bare view measured before and after:

  ping           GET /api/ping: Django's cheapest JSON answer (the ceiling)
  sold_out       POST purchase on a sold-out activity: 410 from the process's memory
  rate_user      POST purchase over the per-shopper limit: 429 (django-ratelimit, Redis)
  rate_ip        POST purchase over the per-address limit: 429 (django-ratelimit, Redis)
  admission      POST purchase over the activity's admission cap: 429 (token bucket, Lua)

It prints RPS, p50/p99 latency, the server's CPU per answer, and for each rejection two
ratios: its RPS over the bare view's, and the bare view's CPU per answer over its own
(what the RPS ratio is when the server has the machine to itself). The RPS ratio is against
the mean of the bare view's runs just before and after it, as the machine's other load
drifts (the target is >= 0.85). Needs wrk (Debian package `wrk`). Uses the embedded PostgreSQL
and Redis unless DATABASE_URL / REDIS_URL are set, in a database of its own
(seckill_bench_gates, recreated) and Redis database 4 (flushed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

BASE_DIR = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
DB_NAME = "seckill_bench_gates"
REDIS_DB = 4
# Few enough that every worker has every shopper's API token cached after the warm-up:
# what is measured is the gate, not the token lookup (a cost of its own, in bench/ proper).
USERS = 100

WRK_SCRIPT = r"""
-- Rotates API tokens over the requests; counts answers by status; prints one JSON line.
local threads = {}
function setup(thread) thread:set("tid", #threads); table.insert(threads, thread) end
function init(args)
  method, path, body = args[1], args[2], args[4]
  tokens = {}
  if args[3] ~= "-" then for line in io.lines(args[3]) do tokens[#tokens + 1] = line end end
  counter = tid * 7919
  statuses = {}
end
function request()
  local headers = {}
  if #tokens > 0 then
    counter = counter + 1
    headers["Authorization"] = "Token " .. tokens[(counter % #tokens) + 1]
  end
  if method == "POST" then
    headers["Content-Type"] = "application/json"
    return wrk.format("POST", path, headers, body)
  end
  return wrk.format(method, path, headers)
end
function response(status) statuses[status] = (statuses[status] or 0) + 1 end
function done(summary, latency, requests)
  local parts = {}
  local agg = {}
  for _, t in ipairs(threads) do
    for code, n in pairs(t:get("statuses")) do agg[tostring(code)] = (agg[tostring(code)] or 0) + n end
  end
  for code, n in pairs(agg) do parts[#parts + 1] = string.format('"%s": %d', code, n) end
  local e = summary.errors
  io.write(string.format('BENCH_JSON {"duration_us": %d, "requests": %d, "statuses": {%s}, ' ..
    '"socket_errors": %d, "p50_us": %d, "p99_us": %d}\n', summary.duration, summary.requests,
    table.concat(parts, ", "), e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
"""


def _with_path(url: str, path: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=path))


def environment() -> tuple[dict[str, str], set[str]]:
    from config import embedded

    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings.production",
        DJANGO_SECURE_SSL_REDIRECT="false",
        DJANGO_LOG_LEVEL="WARNING",
        PYTHONUNBUFFERED="1",
        # The defaults of every gate, except what each scenario's activity sets itself.
        SECKILL_SOLD_OUT_TTL="1",
        SECKILL_ACTIVITY_CACHE_TTL="1",
    )
    env.setdefault("DJANGO_SECRET_KEY", "bench-gates-only-secret-key-not-for-production-0123456789")
    env.setdefault("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost")
    before = embedded.running_services()
    embedded_db, embedded_redis = not env.get("DATABASE_URL"), not env.get("REDIS_URL")
    env.update(embedded.ensure_services(env))
    started = embedded.running_services() - before
    if embedded_db:
        import psycopg

        admin = _with_path(env["DATABASE_URL"], "/postgres").replace("postgres://", "postgresql://", 1)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{DB_NAME}"')
        env["DATABASE_URL"] = _with_path(env["DATABASE_URL"], f"/{DB_NAME}")
    if embedded_redis:
        import redis

        env["REDIS_URL"] = _with_path(env["REDIS_URL"], f"/{REDIS_DB}")
        env.setdefault("CELERY_BROKER_URL", _with_path(env["REDIS_URL"], f"/{REDIS_DB + 1}"))
        for url in (env["REDIS_URL"], env["CELERY_BROKER_URL"]):
            redis.Redis.from_url(url).flushdb()
    return env, started


SETUP = r"""
import json
from datetime import timedelta
from decimal import Decimal
from django.contrib.auth import get_user_model
from django.utils import timezone
from rest_framework.authtoken.models import Token
from inventory.models import Product
from seckill.models import Activity
from seckill.services import activity_create, activity_token_ensure, activity_warmup

now = timezone.now()
product = Product.objects.create(name="Bench gadget", list_price=Decimal("99.00"))
def sale(title, stock, **gates):
    a = activity_create(title=title, product=product, seckill_price=Decimal("0.10"),
                        start_at=now - timedelta(seconds=5), end_at=now + timedelta(hours=2), total_stock=stock)
    Activity.objects.filter(pk=a.pk).update(**gates)
    activity_warmup(activity_id=a.pk)
    return {"id": a.pk, "token": activity_token_ensure(activity_id=a.pk)}
User = get_user_model()
User.objects.bulk_create([User(username=f"gate{i}") for i in range(%(users)d)])
users = list(User.objects.filter(username__startswith="gate").order_by("pk"))
Token.objects.bulk_create([Token(user=u, key=Token.generate_key()) for u in users])
print("BENCH_SETUP " + json.dumps({
    "keys": list(Token.objects.filter(user__in=users).values_list("key", flat=True)),
    "sold_out": sale("sold out", 1, rate_per_user="off", rate_per_ip="off"),
    "rate_user": sale("per-user limit", 100000, rate_per_user="1/h", rate_per_ip="off"),
    "rate_ip": sale("per-address limit", 100000, rate_per_user="off", rate_per_ip="1/h"),
    "admission": sale("admission cap", 100000, rate_per_user="off", rate_per_ip="off",
                      admission_rate=1, admission_burst=1),
}))
"""


def server_cpu_seconds(master_pid: int) -> float:
    """CPU seconds used so far by gunicorn's master and workers (from /proc). Unlike RPS, the
    CPU each answer costs the server hardly moves when other work shares the machine."""
    pids = [master_pid]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == master_pid:
                pids.append(int(entry.name))
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def manage(env: dict, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=BASE_DIR, env=env, capture_output=True, text=True, check=False
    )
    if result.returncode:
        raise SystemExit(f"manage.py {args[0]} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


def post(base: str, path: str, key: str, body: dict) -> int:
    request = urllib.request.Request(
        base + path,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Token {key}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def wrk(base: str, method: str, path: str, tokens: str, body: str, *, seconds: int, connections: int, script: str):
    argv = ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--timeout", "10s", "-s", script, base]
    out = subprocess.run([*argv, "--", method, path, tokens, body], capture_output=True, text=True, check=True).stdout
    line = next(line for line in out.splitlines() if line.startswith("BENCH_JSON "))
    data = json.loads(line.removeprefix("BENCH_JSON "))
    data["rps"] = data["requests"] / (data["duration_us"] / 1e6)
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--port", type=int, default=8713)
    args = parser.parse_args(argv)
    if not shutil.which("wrk"):
        raise SystemExit("wrk is needed: apt-get install wrk")

    from config import embedded

    env, started = environment()
    workdir = Path(tempfile.mkdtemp(prefix="bench-gates-"))
    server = None
    try:
        manage(env, "migrate", "--noinput")
        manage(env, "collectstatic", "--noinput")
        setup = json.loads(manage(env, "shell", "-c", SETUP % {"users": USERS}).split("BENCH_SETUP ", 1)[1])
        tokens = workdir / "tokens.txt"
        tokens.write_text("\n".join(setup["keys"]) + "\n")
        script = workdir / "gates.lua"
        script.write_text(WRK_SCRIPT)

        base = f"http://127.0.0.1:{args.port}"
        server = subprocess.Popen(
            [str(BIN / "gunicorn"), "config.wsgi:application", "--bind", f"127.0.0.1:{args.port}",
             "--workers", str(args.workers), "--backlog", "2048", "--preload"],
            cwd=BASE_DIR, env=env, stdout=open(workdir / "gunicorn.log", "wb"), stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(base + "/api/ping", timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit(f"gunicorn did not start; see {workdir / 'gunicorn.log'}") from None
                time.sleep(0.2)

        # Sell the sold-out activity's one unit; use up every shopper's and the address's one
        # allowed attempt, so that what is measured is the rejection alone.
        sold = setup["sold_out"]
        assert post(base, f"/api/activities/{sold['id']}/purchase", setup["keys"][0], {"token": sold["token"]}) == 202
        for key in setup["keys"]:
            post(
                base,
                f"/api/activities/{setup['rate_user']['id']}/purchase",
                key,
                {"token": setup["rate_user"]["token"]},
            )
        post(
            base,
            f"/api/activities/{setup['rate_ip']['id']}/purchase",
            setup["keys"][0],
            {"token": setup["rate_ip"]["token"]},
        )

        def measured(method: str, path: str, token_file: str, body: str) -> dict:
            cpu = server_cpu_seconds(server.pid)
            result = wrk(base, method, path, token_file, body, seconds=args.seconds, connections=args.connections,
                         script=str(script))  # fmt: skip
            result["cpu_us"] = (server_cpu_seconds(server.pid) - cpu) / max(1, result["requests"]) * 1e6
            return result

        def purchase_run(name: str) -> dict:
            sale = setup[name]
            return measured(
                "POST", f"/api/activities/{sale['id']}/purchase", str(tokens), json.dumps({"token": sale["token"]})
            )

        def ping_run() -> dict:
            return measured("GET", "/api/ping", "-", "")

        # Warm-up: every worker meets every token and learns "sold out".
        wrk(base, "POST", f"/api/activities/{sold['id']}/purchase", str(tokens), json.dumps({"token": sold["token"]}),
            seconds=5, connections=args.connections, script=str(script))  # fmt: skip
        # The machine is shared: each rejection is measured between two runs of the bare view.
        results = {"ping_0": ping_run()}
        for i, name in enumerate(("sold_out", "rate_user", "rate_ip", "admission"), start=1):
            results[name] = purchase_run(name)
            results[f"ping_{i}"] = ping_run()
    finally:
        if server is not None and server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(30)
        embedded.stop_services(started)

    pings = [r["rps"] for name, r in results.items() if name.startswith("ping")]
    ping_rps = sum(pings) / len(pings)
    neighbours, cpu_ping = {}, {}  # each scenario against the ping runs just before and after it
    names = list(results)
    for i, name in enumerate(names):
        if not name.startswith("ping"):
            neighbours[name] = (results[names[i - 1]]["rps"] + results[names[i + 1]]["rps"]) / 2
            cpu_ping[name] = (results[names[i - 1]]["cpu_us"] + results[names[i + 1]]["cpu_us"]) / 2
    expected = {"sold_out": "410", "rate_user": "429", "rate_ip": "429", "admission": "429"}
    setup_line = f"{args.workers} sync workers, wrk -t2 -c{args.connections} -d{args.seconds}s"
    print(f"bench.gates: {setup_line}, {os.cpu_count()} cores")
    print(f"{'scenario':<12} {'RPS':>8} {'p50 ms':>8} {'p99 ms':>8} {'ratio':>6} {'CPU us':>7} {'ratio':>6}  answers")
    for name, r in results.items():
        ratio = cpu_ratio = ""
        if not name.startswith("ping"):
            ratio, cpu_ratio = f"{r['rps'] / neighbours[name]:6.2f}", f"{cpu_ping[name] / r['cpu_us']:6.2f}"
        errors = f" socket errors {r['socket_errors']}" if r["socket_errors"] else ""
        latency = f"{r['p50_us'] / 1000:8.2f} {r['p99_us'] / 1000:8.2f}"
        cost = f"{r['cpu_us']:7.0f} {cpu_ratio:>6}"
        print(f"{name:<12} {r['rps']:8.0f} {latency} {ratio:>6} {cost}  {r['statuses']}{errors}")
    summary = {"ping_rps": round(ping_rps)}
    for name, code in expected.items():
        r = results[name]
        summary[name] = {
            "rps": round(r["rps"]),
            "ratio": round(r["rps"] / neighbours[name], 3),
            "cpu_us": round(r["cpu_us"]),
            "cpu_ratio": round(cpu_ping[name] / r["cpu_us"], 3),
            "expected_share": round(r["statuses"].get(code, 0) / max(1, r["requests"]), 4),
        }
    print("BENCH_GATES_JSON " + json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
