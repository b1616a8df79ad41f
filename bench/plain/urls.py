from django.urls import path

from .views import ping

# The project's path, so that wrk sends the same request line to both.
urlpatterns = [path("api/ping", ping)]
