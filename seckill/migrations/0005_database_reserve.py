"""The database reserve (escrow): the units only the database path sells. Activities that
exist already hold none (their Redis stock was loaded with every unit but the safety
stock); the resync epoch it makes unnecessary goes."""

import django.db.models.expressions
from django.db import migrations, models


def existing_activities_hold_no_reserve(apps, schema_editor):
    apps.get_model("seckill", "Activity").objects.filter(db_reserve__isnull=True).update(db_reserve=0)


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0004_database_reserve"),
        ("seckill", "0004_activity_redis_identity"),
    ]

    operations = [
        migrations.DeleteModel(
            name="ResyncEpoch",
        ),
        migrations.AddField(
            model_name="activity",
            name="db_reserve",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="Units sold only while the shop\'s fast stock counter is out of reach, so the sale goes on through an outage; the rest is never sold that way. Blank: the shop\'s default share of the total stock.",
                null=True,
                verbose_name="outage reserve",
            ),
        ),
        migrations.AddConstraint(
            model_name="activity",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "db_reserve__lte",
                        django.db.models.expressions.CombinedExpression(
                            models.F("total_stock"), "-", models.F("safety_stock")
                        ),
                    ),
                    ("db_reserve__isnull", True),
                    _connector="OR",
                ),
                name="activity_reserve_within_total",
            ),
        ),
        migrations.RunPython(existing_activities_hold_no_reserve, migrations.RunPython.noop),
    ]
