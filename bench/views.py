"""Bench-only API views (mounted by SECKILL_BENCH_VIEWS)."""

from django.utils import timezone
from rest_framework.response import Response
from rest_framework.views import APIView

from seckill.apis import snapshot_or_404
from seckill.gates import purchase_body_parse, purchase_token_check, purchase_window_check

from .naive import naive_purchase


class NaivePurchaseApi(APIView):
    """The database-direct purchase behind the same authentication and gate 1 as
    ``seckill.apis.PurchaseApi``; only the stock step differs."""

    def post(self, request, activity_id: int):
        activity = snapshot_or_404(activity_id)
        token, quantity = purchase_body_parse(request.data, activity=activity)
        now = timezone.now()
        purchase_window_check(activity, now)
        purchase_token_check(activity, token, now)
        order = naive_purchase(activity=activity, user_id=request.user.pk, quantity=quantity)
        return Response({"code": "ordered", "order": order.order_no}, status=202)
