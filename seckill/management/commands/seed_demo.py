import json
import secrets
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand
from django.utils import timezone
from django.utils.formats import date_format
from rest_framework.authtoken.models import Token

from inventory.models import Product
from seckill.models import Activity
from seckill.sale.activities import activity_create, activity_owner_set, activity_save
from seckill.sale.lifecycle import activity_warmup

SHOPPERS = ["alice", "bob", "carol", "dave", "erin"]
# Staff accounts for the README's tour, in the groups the migrations create.
STAFF = {"merchant": "merchants", "reviewer": "reviewers"}
DEMO_PASSWORD = "shop-demo-2026"  # noqa: S105 - demo accounts, printed by make run
SHOPPER_PASSWORD = DEMO_PASSWORD
# The sale that opens after launch: long enough for a newcomer to sign up and look around.
SOON = timedelta(minutes=5)


@dataclass(frozen=True)
class DemoSale:
    product: str
    list_price: Decimal
    description: str
    # The title states no time: it stays true whatever the sale's phase.
    title: str
    price: Decimal
    stock: int
    starts_now: bool
    room: bool = False  # a waiting room (docs/WAITING-ROOM.md): its pre-queue is open from the seed


DEMO_SALES = (
    DemoSale(
        "Demo mug", Decimal("59.00"), "A mug that says 'I won'.", "Demo mug for a dime", Decimal("0.10"), 50, True
    ),
    DemoSale(
        "Demo phone",
        Decimal("3999.00"),
        "A phone, for a flash sale.",
        "Demo phone for a yuan",
        Decimal("1.00"),
        10,
        False,
        room=True,
    ),
)
# The phone's waiting room: its pre-queue is open from the seed (15 min before a start 5 min
# away), then it lets 2 shoppers a second in, at most 10 at a time, each with 2 min to buy.
DEMO_ROOM = {"room_prequeue_minutes": 15, "room_rate": 2, "room_cap": 10, "room_window_seconds": 120}


class Command(BaseCommand):
    help = (
        "Demo data: an admin (password shown once), shoppers, a merchant (who owns the demo sales) and a "
        "reviewer, a sale already running and one opening five minutes later through a waiting room. "
        "Re-running reuses what is there."
    )

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="One JSON object (what make run's banner shows).")

    def handle(self, *args, **options):
        admin_password = self._admin()
        self._accounts()
        now = timezone.now()
        sales: list[dict] = []
        merchant = get_user_model().objects.get(username="merchant")
        for spec in DEMO_SALES:
            activity = self._sale(spec, now, owner=merchant)
            sales.append(
                {
                    "id": activity.pk,
                    "title": activity.title,
                    "phase": activity.phase,
                    "starts_in": max(0, round((activity.start_at - timezone.now()).total_seconds())),
                    "start_local": date_format(timezone.localtime(activity.start_at), "Y-m-d H:i T"),
                }
            )
        summary = {
            "admin_password": admin_password,
            "shoppers": SHOPPERS,
            "staff": STAFF,
            "password": DEMO_PASSWORD,
            "sales": sales,
        }
        if options["json"]:
            self.stdout.write(json.dumps(summary))
            return
        if admin_password:
            self.stdout.write(self.style.SUCCESS(f"admin account: admin / {admin_password}   (shown once; keep it)"))
        self.stdout.write(f"shoppers: {', '.join(SHOPPERS)}; staff: {', '.join(STAFF)} (password {DEMO_PASSWORD})")
        for sale in sales:
            self.stdout.write(f"activity {sale['id']}: {sale['title']} ({sale['phase']}, starts {sale['start_local']})")

    def _admin(self) -> str | None:
        """The admin's password when this run created the account, else None."""
        User = get_user_model()
        if User.objects.filter(username="admin").exists():
            return None
        password = secrets.token_urlsafe(12)
        User.objects.create_superuser("admin", "admin@example.com", password)
        return password

    def _accounts(self) -> None:
        User = get_user_model()
        for name in SHOPPERS:
            user, created = User.objects.get_or_create(username=name, defaults={"email": f"{name}@example.com"})
            if created:
                user.set_password(DEMO_PASSWORD)
                user.save()
            Token.objects.get_or_create(user=user)
        for name, group_name in STAFF.items():
            user, created = User.objects.get_or_create(
                username=name, defaults={"email": f"{name}@example.com", "is_staff": True}
            )
            if created:
                user.set_password(DEMO_PASSWORD)
                user.save()
            group = Group.objects.filter(name=group_name).first()
            if group is not None:
                user.groups.add(group)

    def _sale(self, spec: DemoSale, now, *, owner) -> Activity:
        """The demo sale of ``spec``'s product that is not over yet (title brought up to
        date), or a new one: one set of demo sales, however often this runs. The demo
        merchant owns it."""
        product, _ = Product.objects.get_or_create(
            name=spec.product, defaults={"list_price": spec.list_price, "description": spec.description}
        )
        activity = (
            Activity.objects.filter(product=product, end_at__gt=now)
            .exclude(status=Activity.Status.ENDED)
            .order_by("-start_at")
            .first()
        )
        if activity is None:
            start = now - timedelta(minutes=1) if spec.starts_now else now + SOON
            activity = activity_create(
                title=spec.title,
                product=product,
                seckill_price=spec.price,
                start_at=start,
                end_at=start + timedelta(hours=2),
                total_stock=spec.stock,
                owner=owner,
            )
            if spec.room:
                Activity.objects.filter(pk=activity.pk).update(admission_mode=Activity.AdmissionMode.ROOM, **DEMO_ROOM)
                activity.refresh_from_db()
        elif activity.title != spec.title:  # an older title may state a time that is no longer true
            activity.title = spec.title
            activity = activity_save(activity=activity)
        if activity.owner_id is None:  # a sale seeded before sales had owners
            activity_owner_set(activity_id=activity.pk, owner=owner)
            activity.refresh_from_db()
        if activity.status == Activity.Status.SCHEDULED:
            activity_warmup(activity_id=activity.pk, force=True)
            activity.refresh_from_db()
        return activity
