# The ledger's foreign keys keep their constraints and lose their single-column indexes:
# (activity, kind) leads with activity_id, ledger_one_move_per_order_kind with order_id.
# See core.migration_ops.

import django.db.models.deletion
from django.db import migrations, models

from core.migration_ops import foreign_key_index_drop


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0002_initial"),
        ("orders", "0006_released_reservation"),
        ("seckill", "0003_resync_epoch"),
    ]

    operations = [
        foreign_key_index_drop(
            "inventory",
            "stockmovement",
            "activity",
            models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="stock_movements",
                to="seckill.activity",
            ),
        ),
        foreign_key_index_drop(
            "inventory",
            "stockmovement",
            "order",
            models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="stock_movements",
                to="orders.order",
            ),
        ),
    ]
