"""The migrations match the models, and the foreign keys whose column leads a composite
index keep their constraint without an index of their own (core.migration_ops)."""

import pytest
from django.core.management import call_command
from django.db import connection

from inventory.models import StockMovement
from orders.models import Order


@pytest.mark.django_db
def test_the_models_have_no_change_without_a_migration():
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)  # exits non-zero on a missing one


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("model", "columns"),
    [(Order, ["activity_id", "user_id"]), (StockMovement, ["activity_id", "order_id"])],
)
def test_foreign_keys_keep_their_constraint_and_a_leading_index_but_no_index_of_their_own(model, columns):
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, model._meta.db_table)
    for column in columns:
        own = [n for n, c in constraints.items() if c["index"] and c["columns"] == [column] and not c["unique"]]
        leading = [n for n, c in constraints.items() if (c["index"] or c["unique"]) and c["columns"][:1] == [column]]
        foreign = [n for n, c in constraints.items() if c["foreign_key"] and c["columns"] == [column]]
        assert own == [], (column, own)
        assert leading, f"{column}: no index leads with it"
        assert foreign, f"{column}: the foreign key constraint is gone"
