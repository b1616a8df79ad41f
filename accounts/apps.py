from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts"

    def ready(self) -> None:
        # The deploy check, the login-failure throttle and the language kept at login register here.
        from . import checks, signals, throttles  # noqa: F401
