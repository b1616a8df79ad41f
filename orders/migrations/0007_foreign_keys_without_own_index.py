# The foreign keys of Order keep their constraints and lose their single-column indexes:
# orders_one_live_order_per_user / orders_one_per_reservation / (activity, status) lead
# with activity_id, (user, -created_at) with user_id. See core.migration_ops.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

from core.migration_ops import foreign_key_index_drop


class Migration(migrations.Migration):
    dependencies = [
        ("orders", "0006_released_reservation"),
        ("seckill", "0003_resync_epoch"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        foreign_key_index_drop(
            "orders",
            "order",
            "activity",
            models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="orders",
                to="seckill.activity",
            ),
        ),
        foreign_key_index_drop(
            "orders",
            "order",
            "user",
            models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="seckill_orders",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
    ]
