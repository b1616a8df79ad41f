"""What the report and the verdict read from the shop: its public API (the sale, the flag,
the room's status, each shopper's orders) and the admin's live JSON, over HTTP only, so they
work against a deployment elsewhere as against this machine."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import requests

TIMEOUT = 30


def epoch(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class Shop:
    def __init__(self, base: str, activity: int, *, admin: str | None = None, password: str | None = None):
        self.base, self.activity = base.rstrip("/"), activity
        self.session = requests.Session()
        self.admin, self.password = admin, password
        self.logged_in = False

    def get(self, path: str) -> dict[str, Any] | None:
        try:
            r = self.session.get(f"{self.base}{path}", timeout=TIMEOUT)
            return r.json() if r.status_code == 200 else None
        except (requests.RequestException, ValueError):
            return None

    def sale(self) -> dict[str, Any] | None:
        return self.get(f"/api/activities/{self.activity}/")

    def flag(self) -> dict[str, Any] | None:
        return self.get(f"/api/activities/{self.activity}/flag")

    def room(self) -> dict[str, Any] | None:
        return self.get(f"/api/activities/{self.activity}/room")

    def login(self) -> bool:
        """The admin's own login form (its CSRF cookie and field)."""
        if self.logged_in or not self.admin:
            return self.logged_in
        url = f"{self.base}/admin/login/"
        try:
            page = self.session.get(url, timeout=TIMEOUT)
            found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
            data = {"username": self.admin, "password": self.password, "next": "/admin/"}
            data["csrfmiddlewaretoken"] = found.group(1) if found else ""
            done = self.session.post(url, data=data, headers={"Referer": url}, timeout=TIMEOUT, allow_redirects=False)
            self.logged_in = done.status_code == 302
        except requests.RequestException:
            self.logged_in = False
        return self.logged_in

    def live(self) -> dict[str, Any] | None:
        """The admin's live view of the sale (its JSON), or None without an admin login."""
        if not self.login():
            return None
        return self.get(f"/admin/seckill/activity/{self.activity}/live.json")

    def orders_of(self, tokens: list[str], *, threads: int = 16) -> dict[int, list[dict[str, Any]]]:
        """Every shopper's orders of this sale, as each shopper's own API lists them."""

        def of(index: int) -> tuple[int, list[dict[str, Any]]]:
            session, found, url = requests.Session(), [], f"{self.base}/api/orders/"
            headers = {"Authorization": f"Token {tokens[index]}"}
            while url:
                failure = ""
                for _attempt in range(5):
                    try:
                        r = session.get(url, headers=headers, timeout=TIMEOUT)
                    except requests.RequestException as exc:
                        failure = str(exc)
                        continue
                    if r.status_code == 200:
                        break
                    failure = f"HTTP {r.status_code}"
                else:
                    raise RuntimeError(f"shopper {index}'s orders could not be read: {failure}")
                page = r.json()
                found += [o for o in page.get("results", []) if o.get("activity") == self.activity]
                url = page.get("next")
            return index, found

        with ThreadPoolExecutor(threads) as pool:
            return dict(pool.map(of, range(len(tokens))))
