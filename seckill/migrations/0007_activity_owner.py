"""A sale's owner (the merchant who runs it), and the permission to see every merchant's
sales, given to the reviewers (they review the anomalies and reports of the whole shop).
Merchants see only their own sales; superusers have every permission already."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

GRANTS = {"reviewers": ["view_all_sales"]}


def grant(apps, schema_editor):
    # Permissions are normally created after migrate; make sure the new one exists now.
    from django.contrib.auth.management import create_permissions

    app_config = apps.get_app_config("seckill")
    models_module = getattr(app_config, "models_module", None)
    app_config.models_module = models_module or True
    create_permissions(app_config, apps=apps, verbosity=0)
    app_config.models_module = models_module

    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for name, codenames in GRANTS.items():
        group, _ = Group.objects.get_or_create(name=name)
        perms = Permission.objects.filter(content_type__app_label="seckill", codename__in=codenames)
        assert perms.count() == len(codenames), f"missing permissions {codenames}"
        group.permissions.add(*perms)


def revoke(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for name, codenames in GRANTS.items():
        group = Group.objects.filter(name=name).first()
        if group is not None:
            group.permissions.remove(
                *Permission.objects.filter(content_type__app_label="seckill", codename__in=codenames)
            )


class Migration(migrations.Migration):
    dependencies = [
        ("seckill", "0006_waiting_room"),
        ("orders", "0003_staff_groups"),  # the reviewers group
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="activity",
            options={
                "ordering": ["-start_at"],
                "permissions": [("view_all_sales", "Can see every merchant's sales")],
                "verbose_name_plural": "activities",
            },
        ),
        migrations.AddField(
            model_name="activity",
            name="owner",
            field=models.ForeignKey(
                blank=True,
                help_text="The merchant who runs this sale; merchants see only their own sales.",
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="sales_owned",
                to=settings.AUTH_USER_MODEL,
                verbose_name="merchant",
            ),
        ),
        migrations.RunPython(grant, revoke),
    ]
