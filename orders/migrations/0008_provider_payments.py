# Payments become django-payments' model (orders.Payment, one row per attempt with a
# provider). The rows of the gateway-callback table are carried over as confirmed,
# settled payments of the simulated provider.

import uuid

import django.db.models.deletion
import phonenumber_field.modelfields
from django.conf import settings
from django.db import migrations, models


def legacy_payments_carry_over(apps, schema_editor):
    Legacy = apps.get_model("orders", "LegacyPayment")
    Payment = apps.get_model("orders", "Payment")
    currency = getattr(settings, "PAYMENT_CURRENCY", "CNY")
    Payment.objects.bulk_create(
        Payment(
            order_id=old.order_id,
            variant="simulated",
            status="confirmed",
            currency=currency,
            total=old.amount,
            captured_amount=old.amount,
            transaction_id=old.gateway_ref,
            token=str(uuid.uuid4()),
            settled_at=old.created_at,
        )
        for old in Legacy.objects.all()
    )


class Migration(migrations.Migration):
    dependencies = [("orders", "0007_foreign_keys_without_own_index")]

    operations = [
        migrations.RenameModel("Payment", "LegacyPayment"),
        migrations.CreateModel(
            name="Payment",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("variant", models.CharField(max_length=255)),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("waiting", "Waiting for confirmation"),
                            ("preauth", "Pre-authorized"),
                            ("confirmed", "Confirmed"),
                            ("rejected", "Rejected"),
                            ("refunded", "Refunded"),
                            ("error", "Error"),
                            ("input", "Input"),
                            ("cancelled", "Cancelled"),
                        ],
                        default="waiting",
                        max_length=10,
                    ),
                ),
                (
                    "fraud_status",
                    models.CharField(
                        choices=[
                            ("unknown", "Unknown"),
                            ("accept", "Passed"),
                            ("reject", "Rejected"),
                            ("review", "Review"),
                        ],
                        default="unknown",
                        max_length=10,
                        verbose_name="fraud check",
                    ),
                ),
                ("fraud_message", models.TextField(blank=True, default="")),
                ("created", models.DateTimeField(auto_now_add=True)),
                ("modified", models.DateTimeField(auto_now=True)),
                ("transaction_id", models.CharField(blank=True, max_length=255)),
                ("currency", models.CharField(max_length=10)),
                ("total", models.DecimalField(decimal_places=2, default="0.0", max_digits=9)),
                ("delivery", models.DecimalField(decimal_places=2, default="0.0", max_digits=9)),
                ("tax", models.DecimalField(decimal_places=2, default="0.0", max_digits=9)),
                ("description", models.TextField(blank=True, default="")),
                ("billing_first_name", models.CharField(blank=True, max_length=256)),
                ("billing_last_name", models.CharField(blank=True, max_length=256)),
                ("billing_address_1", models.CharField(blank=True, max_length=256)),
                ("billing_address_2", models.CharField(blank=True, max_length=256)),
                ("billing_city", models.CharField(blank=True, max_length=256)),
                ("billing_postcode", models.CharField(blank=True, max_length=256)),
                ("billing_country_code", models.CharField(blank=True, max_length=2)),
                ("billing_country_area", models.CharField(blank=True, max_length=256)),
                ("billing_email", models.EmailField(blank=True, max_length=254)),
                (
                    "billing_phone",
                    phonenumber_field.modelfields.PhoneNumberField(blank=True, max_length=128, region=None),
                ),
                ("customer_ip_address", models.GenericIPAddressField(blank=True, null=True)),
                ("extra_data", models.TextField(blank=True, default="")),
                ("message", models.TextField(blank=True, default="")),
                ("token", models.CharField(blank=True, default="", max_length=36)),
                ("captured_amount", models.DecimalField(decimal_places=2, default="0.0", max_digits=9)),
                ("settled_at", models.DateTimeField(blank=True, null=True)),
                ("refund_reason", models.CharField(blank=True, max_length=20)),
                (
                    "order",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT, related_name="payments", to="orders.order"
                    ),
                ),
            ],
        ),
        migrations.RunPython(legacy_payments_carry_over, migrations.RunPython.noop),
        migrations.DeleteModel(name="LegacyPayment"),
        migrations.AddIndex(
            model_name="payment",
            index=models.Index(fields=["order", "status"], name="orders_paym_order_i_e3de73_idx"),
        ),
        migrations.AddConstraint(
            model_name="payment",
            constraint=models.UniqueConstraint(fields=("token",), name="payment_token_unique"),
        ),
    ]
