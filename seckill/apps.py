from django.apps import AppConfig


class SeckillConfig(AppConfig):
    name = "seckill"
    verbose_name = "Flash sales"
