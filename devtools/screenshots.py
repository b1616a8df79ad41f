"""`make screenshots`: docs/screenshots/ of the pages staff and shoppers work with, taken
from the running system, so they show what the code does today.

Starts the whole stack (`devtools.stack`, what `make run` runs) on free ports, on its own
embedded PostgreSQL and Redis (state in .local/screenshots/, removed first) or on the
servers DATABASE_URL / REDIS_URL name; the demo shoppers buy in the running demo sale over
HTTP, a stock drift is made and reconciled (an anomaly for the reviewer); then Chromium
(Debian's, driven by Playwright) logs in as each role and shoots each page. A page that
does not exist (no URL of that name, or a 403 / 404 / 500) fails the command, saying which.

First, without the stack: the mails of devtools.docs_mails.SCREENSHOTS as a mail reader shows
them, rendered by the docs' generator (no server, no database) and shot by the same Chromium.

    python -m devtools.screenshots [--out docs/screenshots] [--mails-only]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
PY = sys.executable
CHROMIUM = os.environ.get("SECKILL_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


@dataclass(frozen=True)
class Shot:
    file: str
    url_name: str  # the Django URL name; its argument comes from prepare()
    argument: str
    who: str  # a demo account (seed_demo)
    width: int
    height: int


SHOTS = (
    Shot("admin-live-view.png", "admin:seckill_activity_live", "activity", "merchant", 1280, 900),
    Shot("admin-anomaly.png", "admin:orders_anomalyorder_change", "anomaly", "reviewer", 1280, 900),
    Shot("order-page.png", "order-page", "order_no", "alice", 1000, 720),
)


ADDRESS = {
    "recipient": "Alice Li",
    "phone": "13800138000",
    "country": "CN",
    "region": "Shanghai",
    "city": "Shanghai",
    "line1": "1 Century Avenue, Pudong",
    "postal_code": "200120",
}


def _say(message: str) -> None:
    print(f"[screenshots] {message}", flush=True)


# --- inside Django, on the stack's servers (python -m devtools.screenshots prepare …) -----


def prepare(step: str) -> dict:
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.urls import NoReverseMatch, reverse
    from django.utils import translation
    from rest_framework.authtoken.models import Token

    from orders.models import AnomalyOrder, Order
    from orders.payments import payment_start_for_shopper
    from orders.services.addresses import address_save
    from orders.services.lifecycle import order_cancel
    from orders.simulated import checkout_complete
    from seckill.management.commands.seed_demo import DEMO_PASSWORD, SHOPPERS
    from seckill.models import Activity
    from seckill.sale.reconciliation import reconcile
    from stock.keys import ActivityKeys
    from stock.redis_client import stock_redis

    live = next(a for a in Activity.objects.order_by("pk") if a.phase == "live")
    if step == "tokens":
        users = get_user_model().objects.filter(username__in=SHOPPERS)
        tokens = {t.user.username: t.key for t in Token.objects.filter(user__in=users).select_related("user")}
        return {"activity": live.pk, "tokens": tokens, "password": DEMO_PASSWORD}
    # Orders in each state: alice and bob pay (through the simulated provider, as the pay
    # step does), dave cancels, carol and erin have yet to pay.
    orders = {o.user.username: o for o in Order.objects.filter(activity=live).select_related("user")}
    address_save(user_id=orders["bob"].user_id, fields={**ADDRESS, "recipient": "Bob Wang"})  # alice's: the API
    for name in ("alice", "bob"):
        started = payment_start_for_shopper(order=orders[name])
        if started.payment is not None:
            checkout_complete(payment=started.payment, outcome="succeeded")
    order_cancel(order=orders["dave"], reason="shopper")
    # A drift nothing explains: two units gone from Redis. Reconciliation opens an anomaly.
    stock_redis().decrby(ActivityKeys(live.pk).stock, 2)
    reconcile(activity_id=live.pk)
    anomaly = AnomalyOrder.objects.filter(activity=live, status=AnomalyOrder.Status.OPEN).order_by("-pk").first()
    order = Order.objects.filter(activity=live, user__username="alice").order_by("-pk").first()
    arguments = {
        "activity": live.pk,
        "anomaly": anomaly.pk if anomaly else None,
        "order_no": order.order_no if order else None,
    }
    urls: dict[str, str | None] = {}
    with translation.override("en"):
        for shot in SHOTS:
            argument = arguments[shot.argument]
            try:
                urls[shot.file] = reverse(shot.url_name, args=[argument]) if argument is not None else None
            except NoReverseMatch as exc:
                urls[shot.file] = None
                print(f"[screenshots] {shot.url_name}: {exc}", file=sys.stderr)
    return {"urls": urls, "arguments": arguments}


# --- the driver ------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _http(method: str, url: str, *, key: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json", "Authorization": f"Token {key}"}
    request = urllib.request.Request(url, data=data, headers=headers, method=method)  # noqa: S310 - our http://
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - our http://
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read() or b"{}")
        except ValueError:
            return exc.code, {}


def _wait(condition, *, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    raise RuntimeError(f"gave up waiting for {what} after {timeout:.0f} s")


class Stack:
    """`python -m devtools.stack` on a free port, its output in a log file."""

    def __init__(self, state_dir: Path):
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
        self.env.update(
            DJANGO_SETTINGS_MODULE="config.settings.local",
            PORT=str(self.port),
            WEB_CONCURRENCY="1",
            SECKILL_STATE_DIR=str(state_dir),
            PYTHONUNBUFFERED="1",
        )
        if not self.env.get("DATABASE_URL"):
            self.env["SECKILL_EMBEDDED_PG_PORT"] = str(_free_port())
        if not self.env.get("REDIS_URL"):
            self.env["SECKILL_EMBEDDED_REDIS_PORT"] = str(_free_port())
        self.log_path = state_dir / "stack.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [PY, "-m", "devtools.stack"], cwd=BASE_DIR, env=self.env, stdout=self._log, stderr=subprocess.STDOUT
        )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self) -> None:
        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError(f"the stack exited with {self.proc.returncode}:\n{self.output()[-3000:]}")
            return "press Ctrl-C to stop everything" in self.output()

        _wait(ready, timeout=300, what="the stack to be ready")

    def manage(self, *args: str) -> dict:
        """``prepare`` on the stack's servers; its JSON answer."""
        done = subprocess.run(
            [PY, "-m", "devtools.embedded", "run", "--", PY, "-m", "devtools.screenshots", *args],
            cwd=BASE_DIR,
            env=self.env,
            check=True,
            stdout=subprocess.PIPE,
            text=True,
        )
        return json.loads(done.stdout.strip().splitlines()[-1])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(90)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


def buy(stack: Stack, activity: int, tokens: dict[str, str]) -> None:
    """Every demo shopper buys once (and alice twice: a refusal for the live view's counts);
    alice gives her shipping address through the API."""
    api = f"{stack.base}/api/activities/{activity}"
    for name in [*tokens, "alice"]:
        key = tokens[name]
        _, flag = _http("GET", f"{api}/flag", key=key)
        status, body = _http("POST", f"{api}/purchase", key=key, body={"token": flag.get("token")})
        _say(f"{name} buys: {status} {body.get('code')}")

    def all_ordered():
        for key in tokens.values():
            code, result = _http("GET", f"{api}/result", key=key)
            if code != 200 or result.get("code") != "ordered":
                return False
        return True

    _wait(all_ordered, timeout=120, what="the shoppers' orders")
    status, body = _http("PUT", f"{stack.base}/api/me/address", key=tokens["alice"], body=ADDRESS)
    if status != 200:
        raise RuntimeError(f"alice's shipping address was refused: {status} {body}")


def login(page, base: str, who: str, password: str, target: str) -> None:
    login_path = "/admin/login/" if target.startswith("/admin/") else "/accounts/login/"
    page.goto(f"{base}{login_path}?next={target}")
    page.fill("input[name=username]", who)
    page.fill("input[name=password]", password)
    page.press("input[name=password]", "Enter")
    page.wait_for_load_state("networkidle")


def shoot(base: str, urls: dict[str, str | None], password: str, out: Path) -> list[str]:
    """Each shot's page as its role; the problems found (a missing page is one)."""
    from playwright.sync_api import sync_playwright

    problems = [
        f"{shot.file}: no page named {shot.url_name!r} for the {shot.argument} (not built yet?)"
        for shot in SHOTS
        if urls.get(shot.file) is None
    ]
    wanted = [(shot, url) for shot in SHOTS if (url := urls.get(shot.file))]
    if not wanted:
        return problems
    if not (Path(CHROMIUM).exists() or shutil.which("chromium")):
        return [*problems, f"Chromium not found at {CHROMIUM}: apt-get install -y chromium (make screenshots does)"]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for shot, url in wanted:
                context = browser.new_context(viewport={"width": shot.width, "height": shot.height}, locale="en-US")
                page = context.new_page()
                login(page, base, shot.who, password, url)
                response = page.goto(f"{base}{url}")
                status = response.status if response else 0
                if status != 200:
                    problems.append(f"{shot.file}: {url} answered {status} to {shot.who}")
                else:
                    page.wait_for_load_state("networkidle")
                    page.screenshot(path=str(out / shot.file), full_page=True)
                    _say(f"wrote {out / shot.file} ({url} as {shot.who})")
                context.close()
        finally:
            browser.close()
    return problems


def shoot_mails(out: Path) -> list[str]:
    """The mails' screenshots; the problems found."""
    from playwright.sync_api import sync_playwright

    rendered = subprocess.run(
        [PY, "-m", "devtools.docs_reference", "--mail-screens"],
        cwd=BASE_DIR,
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    screens: dict[str, str] = json.loads(rendered.stdout.strip().splitlines()[-1])
    if not (Path(CHROMIUM).exists() or shutil.which("chromium")):
        return [f"mails: Chromium not found at {CHROMIUM}: apt-get install -y chromium (make screenshots does)"]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 820, "height": 600})
            for file, markup in screens.items():
                page.set_content(markup)
                page.locator(".reader").screenshot(path=str(out / file))
                _say(f"wrote {out / file}")
        finally:
            browser.close()
    return []


def _warn_without_chinese_font() -> None:
    """The header's language switcher says 简体中文: without a CJK font it shows as boxes."""
    if not shutil.which("fc-list"):
        return
    fonts = subprocess.run(["fc-list", ":lang=zh"], capture_output=True, text=True, check=False).stdout
    if not fonts.strip():
        _say("no Chinese font: 简体中文 will show as boxes (apt-get install -y fonts-wqy-zenhei)")


def main(argv: list[str]) -> int:
    if len(argv) > 1 and argv[1] == "prepare":
        print(json.dumps(prepare(argv[2])))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="docs/screenshots", help="folder for the PNG files (docs/screenshots)")
    parser.add_argument("--mails-only", action="store_true", help="only the mails (no stack started)")
    args = parser.parse_args(argv[1:])
    out = (BASE_DIR / args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)

    _warn_without_chinese_font()
    problems = shoot_mails(out)
    if args.mails_only:
        for problem in problems:
            _say(f"FAILED {problem}")
        return 1 if problems else 0

    state_dir = BASE_DIR / ".local" / "screenshots"
    if state_dir.exists():  # a previous run's servers, if any survived it, then its data
        env = {**os.environ, "SECKILL_STATE_DIR": str(state_dir)}
        subprocess.run([PY, "-m", "devtools.embedded", "down"], cwd=BASE_DIR, env=env, check=False)
        shutil.rmtree(state_dir)
    state_dir.mkdir(parents=True)
    state_dir.chmod(0o755)  # the embedded PostgreSQL runs as an unprivileged user under root

    _say(f"starting the stack (log: {state_dir.relative_to(BASE_DIR)}/stack.log)…")
    stack = Stack(state_dir)
    try:
        stack.wait_ready()
        sale = stack.manage("prepare", "tokens")
        buy(stack, sale["activity"], sale["tokens"])
        pages = stack.manage("prepare", "pages")
        problems += shoot(stack.base, pages["urls"], sale["password"], out)
    finally:
        _say("stopping the stack…")
        stack.stop()
    for problem in problems:
        _say(f"FAILED {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
