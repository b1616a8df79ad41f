"""The ceiling for benchmarks: the cheapest JSON answer this Django setup can give.

``GET /api/ping`` → ``{"ok": true}``. A plain Django view behind the full middleware
stack, with no database, no Redis, no authentication and no DRF, so that
``bench/`` can say how much the purchase path adds to Django itself. It reveals
nothing and costs nothing, so it stays on in production (a load balancer may use it
as a liveness probe too; ``/healthz`` checks the dependencies).
"""

from django.http import JsonResponse
from django.views.decorators.http import require_GET


@require_GET
def ping(request):
    return JsonResponse({"ok": True})
