"""The sale's change form: merchants' words for its fields, and the refusal, in the
service's words, of a posted change to a field the sale has locked."""

from django import forms
from django.core.exceptions import ValidationError
from django.utils import timezone

from seckill.models import Activity
from seckill.sale.activities import activity_edit_refusal

# The sale form's words for merchants (the model's help speaks of settings names).
FORM_WORDS = {
    "seckill_price": ("Sale price", None),
    "safety_stock": (None, "Units kept out of the sale, for corrections after a fault."),
    "shards": (
        "Stock counters",
        "Splits the stock over this many counters so a very busy sale keeps up; 1 suits most sales.",
    ),
    "rate_per_user": (None, 'Purchases one shopper may try, e.g. "5/s"; "off": no limit; blank: the shop\'s default.'),
    "rate_per_ip": (None, 'Purchases one address may try, e.g. "50/s"; "off": no limit; blank: the shop\'s default.'),
    "admission_rate": (
        None,
        "Purchases per second let through to the stock, all shoppers together; 0: no cap; blank: the shop's default.",
    ),
    "min_member_level": (None, "Shoppers below this membership level may not buy; blank: no rule."),
    "min_account_age_days": (None, "Accounts younger than this may not buy; blank: no rule."),
}


# Locked fields shown read-only through these (the model's label and help are not for merchants).
LOCKED_SHOWN = {"seckill_price": "locked_sale_price", "safety_stock": "locked_safety_stock"}

# The waiting room's settings (seckill.room): each has a default.
ROOM_FIELDS = frozenset({"admission_mode", "room_prequeue_minutes", "room_rate", "room_cap", "room_window_seconds"})


def stored_activity(obj: Activity) -> Activity:
    """The row as stored: a refused form has written its posted values into ``obj``."""
    return Activity.objects.filter(pk=obj.pk).first() or obj


class LockedFieldsForm(forms.ModelForm):
    """Refuses, with the service's words, a posted change of a field that is locked."""

    locked_fields: dict[str, forms.Field] = {}
    stored: Activity

    def clean(self):
        cleaned = super().clean() or {}
        changed = [name for name, field in self.locked_fields.items() if self._posted_change(name, field)]
        changed += self.changed_data  # the editable ones (a shard change checks the new start)
        refusal = activity_edit_refusal(
            stored=self.stored,
            changed=changed,
            end_at=cleaned.get("end_at"),
            start_at=cleaned.get("start_at") or self.stored.start_at,
            now=timezone.now(),
        )
        if refusal:
            raise ValidationError(f"Not saved: {refusal}.")
        return cleaned

    def _posted_change(self, name: str, field: forms.Field) -> bool:
        posted = field.widget.value_from_datadict(self.data, self.files, self.add_prefix(name))
        if posted is None or (isinstance(posted, list) and not any(posted)):
            return False  # not posted: the page showed it read-only
        initial = getattr(self.stored, name)
        if hasattr(initial, "microsecond"):
            initial = initial.replace(microsecond=0)  # as the page showed it
        return field.has_changed(initial, posted)
