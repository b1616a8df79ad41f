"""A short rehearsal, as CI runs it: the real shop (gunicorn behind the repository's nginx, a
Celery worker), a rehearsal sale and its shoppers made by rehearsal_setup, Locust's shoppers
(rehearsal/locustfile.py, headless, as make rehearse runs it), then the report and the verdict.
And the same with no worker: the verdict turns red and names what broke."""

import io
import json
import subprocess
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from rehearsal.data import USER_PREFIX, rehearsal_activities
from seckill.models import Activity

from ..helpers import BASE_DIR, BIN, start_front, start_gunicorn, subprocess_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]


@pytest.fixture
def front(transactional_db, process_logs):
    """gunicorn behind nginx, the client's address taken from nginx's header as make run does:
    each shopper comes from a loopback address of its own (--source-addresses)."""
    proxied = subprocess_env(SECKILL_TRUSTED_PROXY_HEADER="X-Forwarded-For", SECKILL_TRUSTED_PROXY_COUNT="1")
    web, upstream = start_gunicorn(process_logs, workers=2, threads=8, env=proxied)
    process, base = start_front(process_logs, upstream)
    yield base
    process.stop()
    web.stop()


def rehearse(base: str, out: Path, *, shoppers: int, units: int, settle: float, admission: str = "direct"):
    """rehearsal_setup, then Locust as make rehearse runs it: (exit status, verdict, output)."""
    printed = io.StringIO()
    call_command(
        "rehearsal_setup",
        shoppers=shoppers,
        units=units,
        start_in=12,
        admission=admission,
        pay_timeout=15,
        room_rate=50,
        room_cap=100,
        tokens_file=str(out / "tokens.txt"),
        stdout=printed,
    )
    setup = json.loads(printed.getvalue())
    argv = [
        str(BIN / "locust"),
        "-f",
        str(BASE_DIR / "rehearsal" / "locustfile.py"),
        "--host",
        base,
        "--headless",
        "--only-summary",
        "--loglevel=WARNING",
        f"--activity={setup['activity']}",
        f"--tokens={setup['tokens_file']}",
        "--spike-seconds=2",
        "--tail-seconds=3",
        f"--settle-seconds={settle}",
        "--mix=0.6,0.2,0.2",
        "--p99-target=2000",
        f"--out={out}",
        "--source-addresses",
    ]
    env = subprocess_env(REHEARSAL_ADMIN=setup["admin"], REHEARSAL_ADMIN_PASSWORD=setup["password"])
    done = subprocess.run(argv, cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=150)
    verdict = json.loads((out / "verdict.json").read_text()) if (out / "verdict.json").exists() else None
    return done.returncode, verdict, done.stdout + done.stderr


@pytest.mark.parametrize("admission", ["direct", "room"])
def test_a_short_rehearsal_is_green(front, celery_worker, tmp_path, admission):
    code, verdict, output = rehearse(front, tmp_path, shoppers=300, units=30, settle=25, admission=admission)
    assert verdict is not None, output[-3000:]
    assert verdict["green"], json.dumps(verdict["checks"], indent=1)
    assert code == 0, output[-3000:]
    figures = verdict["figures"]
    # Cancelled orders give their units back: more 202s than units, each with its order.
    assert figures["wins"] >= 30 and figures["orders"] == figures["wins"], figures
    if admission == "direct":  # in a room, the waiting shoppers see the room close instead
        assert figures["sold_out_answers"] > 0
    assert figures["capacity_rps"] > 0
    for chart in ("answers.png", "latency.png", "sold.png", *(["room.png"] if admission == "room" else [])):
        assert (tmp_path / chart).stat().st_size > 0
    assert "Verdict: green" in (tmp_path / "report.html").read_text()
    # The clean-up removes the sale with its orders, payments and stock ledger, and the shoppers.
    call_command("rehearsal_clean", stdout=io.StringIO())
    assert not rehearsal_activities().exists()
    assert not get_user_model().objects.filter(username__startswith=USER_PREFIX).exists()


def test_with_no_worker_the_verdict_is_red_and_names_it(front, tmp_path):
    code, verdict, output = rehearse(front, tmp_path, shoppers=100, units=10, settle=8)
    assert verdict is not None, output[-3000:]
    assert not verdict["green"]
    red = [c for c in verdict["checks"] if not c["ok"]]
    assert [c["name"] for c in red] == ["every 202 became an order"], red
    assert "Celery worker" in red[0]["detail"]
    assert code == 1
    assert "RED" in output and "every 202 became an order" in output


def test_clean_removes_the_rehearsal_and_nothing_else(tmp_path):
    real = get_user_model().objects.create_user("rehearsal_fan", password="x")  # not the tag: no dash
    call_command(
        "create_activity",
        title="A real sale",
        product_name="Real thing",
        price="10.00",
        seckill_price="1.00",
        stock=5,
        start="+600",
        end="+1200",
        stdout=io.StringIO(),
    )
    call_command(
        "rehearsal_setup", shoppers=5, units=2, start_in=600, tokens_file=str(tmp_path / "t"), stdout=io.StringIO()
    )
    assert rehearsal_activities().count() == 1
    call_command("rehearsal_clean", stdout=io.StringIO())
    assert not rehearsal_activities().exists()
    assert not get_user_model().objects.filter(username__startswith=USER_PREFIX).exists()
    assert get_user_model().objects.filter(pk=real.pk).exists()
    assert Activity.objects.filter(title="A real sale").exists()
