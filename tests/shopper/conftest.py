"""Fixtures of the shopper tests: fingerprinted static files, a gunicorn serving them,
and real Chromium driven by Playwright."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connections

from tests.helpers import BASE_DIR, start_gunicorn, subprocess_env

CHROMIUM = os.environ.get("SECKILL_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]
# The browser tests always take their screenshots; they land in docs/ only when asked
# (SECKILL_SCREENSHOT_DIR=docs/screenshots), so a test run leaves the tree clean.
SCREENSHOT_DIR_ENV = "SECKILL_SCREENSHOT_DIR"


def manifest_env(**extra: str) -> dict[str, str]:
    return subprocess_env(SECKILL_TEST_MANIFEST_STATIC="1", **extra)


@pytest.fixture(scope="session", autouse=True)
def static_root_exists():
    """WhiteNoise warns on every in-process request when STATIC_ROOT is missing (tests
    serve through the finders and need no collectstatic)."""
    from django.conf import settings

    Path(settings.STATIC_ROOT).mkdir(parents=True, exist_ok=True)


@pytest.fixture(scope="session")
def collected_static():
    """collectstatic once per run, with the production storage (hashed names + manifest)."""
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="config.settings.test", SECKILL_TEST_MANIFEST_STATIC="1")
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "--clear", "-v", "0"],
        cwd=BASE_DIR,
        env=env,
        check=True,
    )
    return BASE_DIR / ".local" / "test-staticfiles"


@pytest.fixture
def shop_server(transactional_db, process_logs, collected_static):
    """gunicorn on the test database, serving fingerprinted static files (WhiteNoise)."""
    process, base = start_gunicorn(process_logs, workers=2, threads=8, env=manifest_env())
    yield base
    process.stop()


@pytest.fixture
def chromium_browser(monkeypatch):
    """Debian's Chromium driven by Playwright. No skip: if it cannot start, the browser
    tests fail and say why (.ci/run installs the package)."""
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists() or shutil.which("chromium"), (
        f"Chromium not found at {CHROMIUM}: install Debian's package (apt-get install -y chromium)"
    )
    # Playwright's sync API runs an event loop in this thread while the test uses the ORM
    # synchronously; Django refuses that unless told (only for the browser tests' duration).
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()
        # While Playwright's loop runs, Django keeps this context's connections apart from
        # the test's usual ones; close them, or the test database cannot be dropped at the end.
        connections.close_all()


@pytest.fixture
def screenshot_dir(tmp_path) -> Path:
    wanted = os.environ.get(SCREENSHOT_DIR_ENV)
    folder = (BASE_DIR / wanted) if wanted else tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def browser_context(chromium_browser):
    context = chromium_browser.new_context(viewport={"width": 1000, "height": 760}, locale="en-US")
    yield context
    context.close()
