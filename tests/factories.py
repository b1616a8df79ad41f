from datetime import timedelta
from decimal import Decimal

import factory
from django.contrib.auth import get_user_model
from django.utils import timezone
from rest_framework.authtoken.models import Token

from inventory.models import Product
from seckill.sale.activities import activity_create
from seckill.sale.lifecycle import activity_warmup


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"shopper{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")
    password = factory.PostGenerationMethodCall("set_password", "pw-for-tests")

    @factory.post_generation
    def save_password(obj, create, extracted, **kwargs):
        if create:
            obj.save(update_fields=["password"])


class ProductFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Product

    name = factory.Sequence(lambda n: f"Product {n}")
    list_price = Decimal("99.00")


def make_activity(*, stock: int = 10, started: bool = True, warm: bool = True, **overrides):
    """An activity through the real service (with its stock row), live by default."""
    now = timezone.now()
    fields = {
        "title": "Test sale",
        "product": ProductFactory(),
        "seckill_price": Decimal("0.10"),
        "start_at": now - timedelta(seconds=5) if started else now + timedelta(hours=1),
        "end_at": now + timedelta(hours=1) if started else now + timedelta(hours=2),
        "total_stock": stock,
        # Every unit in Redis unless a test gives the database path a reserve to sell.
        "db_reserve": 0,
    }
    fields.update(overrides)
    activity = activity_create(**fields)
    if warm:
        activity_warmup(activity_id=activity.pk)
        activity.refresh_from_db()
    return activity


def make_users(n: int, prefix: str = "buyer") -> list:
    """n shoppers with API tokens, in two queries."""
    User = get_user_model()
    users = User.objects.bulk_create([User(username=f"{prefix}{i}") for i in range(n)])
    users = list(User.objects.filter(username__in=[u.username for u in users]).order_by("pk"))
    Token.objects.bulk_create([Token(user=u, key=Token.generate_key()) for u in users])
    return users


def token_of(user) -> str:
    return Token.objects.get(user=user).key
