from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts"

    def ready(self) -> None:
        # The login-failure throttle and the language kept at login are signal receivers.
        from . import signals, throttles  # noqa: F401
