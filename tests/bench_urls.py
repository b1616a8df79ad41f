"""The URLconf with the bench-only endpoints mounted, as SECKILL_BENCH_VIEWS does."""

from django.urls import include, path

from config.urls import urlpatterns as site

urlpatterns = [path("api/bench/", include("bench.urls")), *site]
