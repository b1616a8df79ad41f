"""Staff groups: merchants run activities and products; reviewers review anomalies and
reconciliation reports and may only look at activities."""

from django.db import migrations

GROUPS = {
    "merchants": [
        ("seckill", "activity", ["add", "change", "view"]),
        ("inventory", "product", ["add", "change", "view"]),
        ("inventory", "seckillstock", ["view"]),
    ],
    "reviewers": [
        ("orders", "anomalyorder", ["view", "change"]),
        ("orders", "reconciliationreport", ["view"]),
        ("orders", "order", ["view"]),
        ("inventory", "stockmovement", ["view"]),
        ("inventory", "seckillstock", ["view"]),
        ("inventory", "product", ["view"]),
        ("seckill", "activity", ["view"]),
    ],
}


def create_groups(apps, schema_editor):
    # Permissions are normally created after migrate; make sure they exist now.
    from django.contrib.auth.management import create_permissions

    for app_config in apps.get_app_configs():
        models_module = getattr(app_config, "models_module", None)
        app_config.models_module = models_module or True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = models_module

    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for name, grants in GROUPS.items():
        group, _ = Group.objects.get_or_create(name=name)
        for app_label, model, actions in grants:
            codenames = [f"{action}_{model}" for action in actions]
            perms = Permission.objects.filter(content_type__app_label=app_label, codename__in=codenames)
            assert perms.count() == len(codenames), f"missing permissions for {app_label}.{model}"
            group.permissions.add(*perms)


def remove_groups(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=GROUPS).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("orders", "0002_lifecycle_reports"),
        ("seckill", "0001_initial"),
        ("inventory", "0002_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_groups, remove_groups)]
