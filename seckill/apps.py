from django.apps import AppConfig


class SeckillConfig(AppConfig):
    name = "seckill"
    verbose_name = "Flash sales"

    def ready(self):
        from . import authentication  # noqa: F401 - connects the shared token cache's signals
