"""The throttles of the account forms: sign-up, password reset and login (the admin's and
the shopper's), by client address and by username or e-mail, on top of django-axes'
per (username, address) lock-out. docs/GATES.md says why each is shaped as it is.

Login: every attempt counts against the address; only failures count against the
username. Once a username has failed ``login-username`` times in the window, an attempt
for it is refused (429) from any address that has itself failed for it in the window;
an address that has not may still try, so a correct password from elsewhere gets in
while a scanner's addresses are shut out. A failed attempt past the limit answers 429
as well, the same answer for every wrong password.
"""

import hashlib

from django.contrib.auth.signals import user_login_failed
from django.dispatch import receiver

from core.client_address import client_ip
from core.throttles import Throttled, throttle_at_limit, throttle_count, throttle_page, throttled_page

LOGIN_VIEWS = frozenset({"login", "admin:login"})
PASSWORD_RESET_VIEWS = frozenset({"password_reset"})


def _digest(value: str) -> str:
    # Usernames and e-mails go into cache keys hashed: no personal data in Redis key names.
    return hashlib.sha256(value.strip().lower().encode()).hexdigest()[:32]


def address_key(request) -> str:
    return f"ip:{client_ip(request) or '-'}"


def _username(request) -> str:
    return str(request.POST.get("username", ""))


def _pair_key(request, username: str) -> str:
    return f"{_digest(username)}:{address_key(request)}"


def login_admit(request) -> Throttled | None:
    """Before the login view: count the attempt against the address; refuse a username
    over its failure limit when this address has failed for it too."""
    throttled = throttle_count(request, name="login-address", key=address_key(request))
    if throttled is not None:
        return throttled
    username = _username(request)
    if not username:
        return None
    over = throttle_count(request, name="login-username", key=_digest(username), increment=False)
    if over is not None and throttle_at_limit(request, name="login-pair", key=_pair_key(request, username)):
        return over
    return None


def login_failed(request, username: str) -> Throttled | None:
    """A failed attempt: counted against the username and the (username, address) pair;
    past the username's limit, the answer is 429."""
    throttle_count(request, name="login-pair", key=_pair_key(request, username))
    return throttle_count(request, name="login-username", key=_digest(username))


@receiver(user_login_failed, dispatch_uid="accounts.throttles.login_failed")
def _on_login_failed(sender, credentials, request=None, **kwargs):
    if request is None or request.method != "POST":
        return
    username = credentials.get("username") or _username(request)
    throttled = login_failed(request, str(username))
    if throttled is not None:
        request.login_throttled = throttled


def password_reset_admit(request) -> Throttled | None:
    """By address and by the e-mail asked for, registered or not: the answer never tells."""
    throttled = throttle_count(request, name="password-reset-address", key=address_key(request))
    if throttled is not None:
        return throttled
    email = str(request.POST.get("email", ""))
    return throttle_count(request, name="password-reset-email", key=_digest(email)) if email else None


class AccountThrottleMiddleware:
    """Throttles the login and password-reset POSTs of django.contrib.auth's views (the
    shopper's and the admin's login): a readable 429 page with Retry-After."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        # Set by a failed login past its username's limit (user_login_failed, above).
        login_throttled = getattr(request, "login_throttled", None)
        return throttled_page(request, login_throttled) if login_throttled is not None else response

    def process_view(self, request, view_func, view_args, view_kwargs):
        if request.method != "POST" or request.resolver_match is None:
            return None
        view_name = request.resolver_match.view_name
        if view_name in LOGIN_VIEWS:
            throttled = login_admit(request)
        elif view_name in PASSWORD_RESET_VIEWS:
            throttled = password_reset_admit(request)
        else:
            return None
        return throttled_page(request, throttled) if throttled is not None else None


signup_throttle = throttle_page("signup-address", key=address_key)
