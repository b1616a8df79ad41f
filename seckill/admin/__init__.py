"""The sale in Django admin: merchants create and run their sales, reviewers act on what
reconciliation found. Importing this package registers every ModelAdmin (Django's admin
autodiscovery imports ``seckill.admin``)."""

from seckill.admin import activities  # noqa: F401
