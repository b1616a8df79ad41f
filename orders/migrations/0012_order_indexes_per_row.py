# Two indexes fewer per order row (docs/DESIGN-NOTES.md, "The order batch"): the
# (activity, status) index, whose lookups PostgreSQL answers as fast by combining
# orders_one_per_reservation (activity_id) with (status, pay_deadline), and the
# varchar_pattern_ops index Django adds beside order_no's unique index, which only a
# LIKE 'prefix%' would use (nothing runs one: the admin's search is a LIKE '%…%').
# The latter is no part of the migration state: an AlterField of order_no would make
# it again, and would need this drop again.

from django.db import migrations


def _like_index(schema_editor, model) -> str:
    return schema_editor._create_index_name(model._meta.db_table, ["order_no"], suffix="_like")


def like_index_drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {_like_index(schema_editor, apps.get_model('orders', 'Order'))}")


def like_index_create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        model = apps.get_model("orders", "Order")
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {_like_index(schema_editor, model)}"
            f" ON {model._meta.db_table} (order_no varchar_pattern_ops)"
        )


class Migration(migrations.Migration):
    dependencies = [("orders", "0011_reconciliation_summary")]

    operations = [
        migrations.RemoveIndex(model_name="order", name="orders_orde_activit_7099aa_idx"),
        migrations.RunPython(like_index_drop, like_index_create),
    ]
