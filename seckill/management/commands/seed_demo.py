import secrets
from datetime import timedelta
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.utils import timezone
from rest_framework.authtoken.models import Token

from inventory.models import Product
from seckill.activities import activity_create
from seckill.lifecycle import activity_warmup
from seckill.models import Activity

SHOPPERS = ["alice", "bob", "carol", "dave", "erin"]
SHOPPER_PASSWORD = "shop-demo-2026"  # noqa: S105 - demo accounts, printed by make run


class Command(BaseCommand):
    help = "Demo data: an admin (password printed once), shoppers, a running sale and one starting in a minute."

    def handle(self, *args, **options):
        User = get_user_model()
        if not User.objects.filter(username="admin").exists():
            password = secrets.token_urlsafe(12)
            User.objects.create_superuser("admin", "admin@example.com", password)
            self.stdout.write(self.style.SUCCESS(f"admin account: admin / {password}   (shown once; keep it)"))
        for name in SHOPPERS:
            user, created = User.objects.get_or_create(username=name, defaults={"email": f"{name}@example.com"})
            if created:
                user.set_password(SHOPPER_PASSWORD)
                user.save()
            Token.objects.get_or_create(user=user)
        self.stdout.write(f"shoppers: {', '.join(SHOPPERS)} (password {SHOPPER_PASSWORD})")

        now = timezone.now()
        phone, _ = Product.objects.get_or_create(
            name="Demo phone", defaults={"list_price": Decimal("3999.00"), "description": "A phone, for a flash sale."}
        )
        mug, _ = Product.objects.get_or_create(
            name="Demo mug", defaults={"list_price": Decimal("59.00"), "description": "A mug that says 'I won'."}
        )
        live = Activity.objects.filter(product=mug, end_at__gt=now).exclude(status=Activity.Status.ENDED).first()
        if live is None:
            live = activity_create(
                title="Mug for a dime (running)",
                product=mug,
                seckill_price=Decimal("0.10"),
                start_at=now - timedelta(minutes=1),
                end_at=now + timedelta(hours=2),
                total_stock=50,
            )
        upcoming = Activity.objects.filter(product=phone, start_at__gt=now).first()
        if upcoming is None:
            upcoming = activity_create(
                title="Phone for a yuan (starts in a minute)",
                product=phone,
                seckill_price=Decimal("1.00"),
                start_at=now + timedelta(minutes=1),
                end_at=now + timedelta(hours=2),
                total_stock=10,
            )
        for activity in (live, upcoming):
            if activity.status == Activity.Status.SCHEDULED:
                activity_warmup(activity_id=activity.pk, force=True)
            self.stdout.write(f"activity {activity.pk}: {activity.title} ({activity.phase})")
