"""The purchase's JSON, described for DRF and the OpenAPI schema (validation is the gates')."""

from rest_framework import serializers


class PurchaseRequestSerializer(serializers.Serializer):
    """Documentation of the body; validation is seckill.purchase.body.purchase_body_parse."""

    token = serializers.CharField()
    quantity = serializers.IntegerField(required=False, default=1, min_value=1)
    captcha_id = serializers.CharField(required=False, help_text="From the captcha endpoint, when the sale asks")
    captcha_answer = serializers.CharField(required=False, help_text="The answer to that captcha's question")
    ticket = serializers.CharField(required=False, help_text="A waiting-room sale: the ticket the room gave you")


class CaptchaSerializer(serializers.Serializer):
    captcha_id = serializers.CharField()
    question = serializers.CharField()
    expires_in = serializers.IntegerField(help_text="Seconds the challenge stays valid")


class PurchaseQueuedSerializer(serializers.Serializer):
    code = serializers.CharField()
    reservation = serializers.CharField()
    remaining = serializers.IntegerField()
