"""Migration operations shared by the apps' migrations."""

from django.db import migrations


def foreign_key_index_drop(
    app_label: str, model_name: str, field_name: str, field
) -> migrations.SeparateDatabaseAndState:
    """A foreign key loses its own single-column index (``field`` is the field as it now
    reads, with ``db_index=False``) when a composite index or constraint already leads
    with its column: one index less to write per row, the same lookups.

    Django's AlterField would drop the foreign key constraint and add it again, which
    validates every row of the table under lock; only the index is dropped here."""

    def column_indexes(apps, schema_editor):
        model = apps.get_model(app_label, model_name)
        column = model._meta.get_field(field_name).column
        return model, schema_editor._constraint_names(model, [column], index=True, unique=False, primary_key=False)

    def forwards(apps, schema_editor):
        model, names = column_indexes(apps, schema_editor)
        for name in names:
            schema_editor.execute(schema_editor._delete_index_sql(model, name))

    def backwards(apps, schema_editor):
        model, names = column_indexes(apps, schema_editor)
        if not names:
            schema_editor.execute(schema_editor._create_index_sql(model, fields=[model._meta.get_field(field_name)]))

    return migrations.SeparateDatabaseAndState(
        state_operations=[migrations.AlterField(model_name=model_name, name=field_name, field=field)],
        database_operations=[migrations.RunPython(forwards, backwards)],
    )
