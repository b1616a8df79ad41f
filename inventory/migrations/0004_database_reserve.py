"""The database reserve (escrow): the part of available only the database path sells."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0003_foreign_keys_without_own_index"),
        ("seckill", "0004_activity_redis_identity"),
    ]

    operations = [
        migrations.AddField(
            model_name="seckillstock",
            name="reserve",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="seckillstock",
            name="released",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddConstraint(
            model_name="seckillstock",
            constraint=models.CheckConstraint(
                condition=models.Q(("reserve__lte", models.F("available"))), name="stock_reserve_within_available"
            ),
        ),
    ]
