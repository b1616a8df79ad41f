"""The sale in Django admin: merchants create and run their sales, reviewers act on what
reconciliation found. Importing this package registers every ModelAdmin (Django's admin
autodiscovery imports ``seckill.admin``)."""

from django.contrib import admin

from seckill.admin import activities, shoppers  # noqa: F401

# The admin wears the shop's name, as its pages do (templates/base.html).
admin.site.site_header = "Flash sale · shop admin"
admin.site.site_title = "Flash sale admin"
admin.site.index_title = "Run the shop"
