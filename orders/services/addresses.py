"""The shopper's shipping address, and its copy on an order when payment starts."""

from ..models import Order, ShippingAddress


class AddressRequired(Exception):
    """The shopper has no shipping address yet: it is asked for before payment."""


def address_save(*, user_id: int, fields: dict[str, str]) -> ShippingAddress:
    """Create or replace the shopper's address. Raises django's ValidationError (per field)
    for anything the model refuses: lengths, control characters, phone, postal code."""
    address = ShippingAddress.objects.filter(user_id=user_id).first() or ShippingAddress(user_id=user_id)
    for name in ShippingAddress.SNAPSHOT_FIELDS:
        setattr(address, name, fields.get(name, ""))
    address.full_clean(exclude=["user"])
    address.save()
    return address


def order_address_attach(*, order: Order) -> Order:
    """Copy the shopper's current address onto a pending order (each payment attempt takes
    the address as it is then); a paid or cancelled order keeps the copy it has."""
    if order.status != Order.Status.PENDING:
        return order
    address = ShippingAddress.objects.filter(user_id=order.user_id).first()
    if address is None:
        raise AddressRequired("Add a shipping address before paying.")
    snapshot = address.snapshot()
    Order.objects.filter(pk=order.pk, status=Order.Status.PENDING).update(shipping_address=snapshot)
    order.shipping_address = snapshot
    return order
