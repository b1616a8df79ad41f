"""The client's address as the site sees it: the socket's, or the trusted proxy's header.
One home for the purchase's limits and the account throttles alike."""

import functools
import ipaddress

from django.conf import settings


def client_ip(request) -> str | None:
    """The client's address: the socket's, or the trusted proxy header's when one is set.

    With SECKILL_TRUSTED_PROXY_HEADER (e.g. X-Forwarded-For) the address is the one
    SECKILL_TRUSTED_PROXY_COUNT hops from the right: the entry our own proxy wrote, which
    a client cannot forge (entries further left are whatever the client sent).
    """
    header = settings.SECKILL_TRUSTED_PROXY_HEADER
    if header:
        value = request.META.get("HTTP_" + header.upper().replace("-", "_"), "")
        hops = [hop.strip() for hop in value.split(",") if hop.strip()]
        count = max(1, settings.SECKILL_TRUSTED_PROXY_COUNT)
        if len(hops) >= count:
            ip = _valid_ip(hops[-count])
            if ip:
                return ip
    return _valid_ip(request.META.get("REMOTE_ADDR", ""))


def _valid_ip(value: str) -> str | None:
    # Three calls a purchase with the same few addresses: parsed once each (an address
    # is at most 45 characters; anything longer is not one and is not remembered).
    return _ip_parsed(value) if len(value) <= 45 else None


@functools.lru_cache(maxsize=4096)
def _ip_parsed(value: str) -> str | None:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return None
