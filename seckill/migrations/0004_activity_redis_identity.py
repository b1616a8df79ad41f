from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("seckill", "0003_resync_epoch")]

    operations = [
        migrations.AddField(
            model_name="activity",
            name="redis_identity",
            field=models.JSONField(blank=True, default=dict, editable=False),
        ),
    ]
