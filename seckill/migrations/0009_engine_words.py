from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("seckill", "0008_plain_words"),
    ]

    operations = [
        migrations.AlterField(
            model_name="activity",
            name="safety_stock",
            field=models.PositiveIntegerField(
                default=0,
                help_text="Units kept out of the sale, for corrections after a fault.",
                verbose_name="safety stock",
            ),
        ),
        migrations.AlterField(
            model_name="activity",
            name="shards",
            field=models.PositiveSmallIntegerField(default=1, verbose_name="stock counters"),
        ),
        migrations.AlterField(
            model_name="activity",
            name="status",
            field=models.CharField(
                choices=[("scheduled", "scheduled"), ("warmed", "stock loaded"), ("ended", "ended")],
                default="scheduled",
                max_length=12,
            ),
        ),
        migrations.AlterField(
            model_name="activity",
            name="warmed_at",
            field=models.DateTimeField(blank=True, editable=False, null=True, verbose_name="stock loaded at"),
        ),
    ]
