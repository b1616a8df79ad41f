from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("orders", "0013_plain_words"),
    ]

    operations = [
        migrations.AlterField(
            model_name="anomalyorder",
            name="kind",
            field=models.CharField(
                choices=[
                    ("db_guard_failed", "reserved, but the shop's records had no unit left"),
                    ("duplicate_reservation", "reservation for a shopper who already has an order"),
                    ("replay_exhausted", "reservation could not become an order"),
                    ("paid_not_deducted", "paid order without a stock deduction"),
                    ("order_not_deducted", "pending order without a stock deduction"),
                    ("drift", "units not accounted for, cause unknown"),
                ],
                max_length=30,
            ),
        ),
    ]
