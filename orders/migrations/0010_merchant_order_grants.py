"""Merchants see the orders of their sales (with the shipping addresses) and export them
for fulfilment; superusers have every permission already."""

from django.db import migrations

GRANTS = {
    "merchants": [("orders", "order", ["view", "export"])],
}


def grant(apps, schema_editor):
    # Permissions are normally created after migrate; make sure the new one exists now.
    from django.contrib.auth.management import create_permissions

    app_config = apps.get_app_config("orders")
    models_module = getattr(app_config, "models_module", None)
    app_config.models_module = models_module or True
    create_permissions(app_config, apps=apps, verbosity=0)
    app_config.models_module = models_module

    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for name, grants in GRANTS.items():
        group, _ = Group.objects.get_or_create(name=name)
        for app_label, model, actions in grants:
            codenames = [f"{action}_{model}" for action in actions]
            perms = Permission.objects.filter(content_type__app_label=app_label, codename__in=codenames)
            assert perms.count() == len(codenames), f"missing permissions for {app_label}.{model}"
            group.permissions.add(*perms)


def revoke(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for name, grants in GRANTS.items():
        group = Group.objects.filter(name=name).first()
        if group is None:
            continue
        for app_label, model, actions in grants:
            codenames = [f"{action}_{model}" for action in actions]
            group.permissions.remove(
                *Permission.objects.filter(content_type__app_label=app_label, codename__in=codenames)
            )


class Migration(migrations.Migration):
    dependencies = [("orders", "0009_shipping_address"), ("orders", "0003_staff_groups")]

    operations = [migrations.RunPython(grant, revoke)]
