"""A shopper's shipping address, which the pay step asks for first."""

from orders.models import ShippingAddress

ADDRESS = {
    "recipient": "张三",
    "phone": "+86 138 0013 8000",
    "country": "CN",
    "region": "上海市",
    "city": "上海",
    "line1": "浦东新区世纪大道 100 号",
    "line2": "12 楼",
    "postal_code": "200120",
}


def give_address(user, **fields) -> ShippingAddress:
    address, _ = ShippingAddress.objects.update_or_create(user=user, defaults={**ADDRESS, **fields})
    return address
