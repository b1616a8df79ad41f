"""Who may buy, as the purchase's last checks read it: the blacklist (users, devices,
addresses and networks; from this process's memory, else the cache Redis, else the
database: core.shared_cache) and what an activity's eligibility rules need of a shopper
(their member level and age, cached in Redis for SECKILL_SHOPPER_CACHE_TTL)."""

import ipaddress
import json
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import cast

import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from core.memory import MISSING
from core.shared_cache import Codec, SharedCache, SharedKeys
from seckill.models import BlacklistEntry
from stock.breaker import redis_away
from stock.redis_client import cache_redis

logger = logging.getLogger(__name__)

_cache = SharedCache(
    "seckill.purchase.shoppers",
    client=cache_redis,
    away=redis_away,
    rebuild_wait=lambda: settings.SECKILL_CACHE_REBUILD_WAIT,
)

_BLACKLIST_KEYS = SharedKeys("seckill:blacklist", "seckill:blacklist-gen", "seckill:blacklist-lock")


@dataclass(frozen=True)
class Blacklist:
    users: frozenset[int] = frozenset()
    devices: frozenset[str] = frozenset()
    addresses: frozenset[str] = frozenset()
    networks: tuple = ()

    def has_ip(self, ip: str | None) -> bool:
        if not ip:
            return False
        if ip in self.addresses:
            return True
        if not self.networks:
            return False
        try:
            address = ipaddress.ip_address(ip)
        except ValueError:
            return False
        return any(address in network for network in self.networks)


def blacklist_load() -> Blacklist:
    now = timezone.now()
    rows = BlacklistEntry.objects.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now)).values_list(
        "kind", "value", "expires_at"
    )
    users, devices, addresses, networks = set(), set(), set(), []
    for kind, value, _expires in rows:
        if kind == BlacklistEntry.Kind.USER and value.isdigit():
            users.add(int(value))
        elif kind == BlacklistEntry.Kind.DEVICE:
            devices.add(value)
        elif kind == BlacklistEntry.Kind.IP:
            try:
                network = ipaddress.ip_network(value, strict=False)
            except ValueError:
                continue
            if network.num_addresses == 1:
                addresses.add(str(network.network_address))
            else:
                networks.append(network)
    return Blacklist(frozenset(users), frozenset(devices), frozenset(addresses), tuple(networks))


def _blacklist_dump(listed: Blacklist) -> dict:
    return {
        "users": sorted(listed.users),
        "devices": sorted(listed.devices),
        "addresses": sorted(listed.addresses),
        "networks": [str(n) for n in listed.networks],
    }


def _blacklist_undump(data: dict) -> Blacklist:
    return Blacklist(
        frozenset(data["users"]),
        frozenset(data["devices"]),
        frozenset(data["addresses"]),
        tuple(ipaddress.ip_network(n) for n in data["networks"]),
    )


_BLACKLIST_CODEC = Codec(
    blacklist_load, _blacklist_dump, _blacklist_undump, lambda _value: settings.SECKILL_BLACKLIST_REDIS_TTL
)


def blacklist_remembered() -> bool:
    """The blacklist's copy is in this process's memory: ``blacklist()`` asks nothing."""
    return _cache.remembered("blacklist") is not MISSING


def blacklist() -> Blacklist:
    """Every entry in force, from this process's memory (SECKILL_BLACKLIST_CACHE_TTL) or Redis.

    An entry that expires keeps working until the copy is rebuilt (at most
    SECKILL_BLACKLIST_REDIS_TTL).
    """
    return _cache.get(
        "blacklist",
        _BLACKLIST_KEYS,
        _BLACKLIST_CODEC,
        local_ttl=settings.SECKILL_BLACKLIST_CACHE_TTL,
        shared=settings.SECKILL_BLACKLIST_REDIS_TTL > 0,
    )


def blacklist_forget() -> None:
    def forget_now() -> None:
        _cache.local.pop("blacklist")
        try:
            _cache.forget(_BLACKLIST_KEYS)
        except redis.RedisError as exc:  # the Redis copy then lives out its SECKILL_BLACKLIST_REDIS_TTL
            logger.warning("could not drop the cached blacklist: %s", exc)

    _cache.local.pop("blacklist")
    transaction.on_commit(forget_now)


@dataclass(frozen=True)
class ShopperFacts:
    member_level: int
    date_joined: datetime


def _shopper_key(user_id: int) -> str:
    return f"seckill:shopper:{user_id}"


def _shopper_facts_load(user_id: int) -> ShopperFacts | None:
    row = (
        get_user_model().objects.filter(pk=user_id).values_list("date_joined", "shopper_profile__member_level").first()
    )
    facts = ShopperFacts(member_level=row[1] or 0, date_joined=row[0]) if row else None
    return facts


def shopper_facts(user_id: int) -> ShopperFacts | None:
    """What eligibility rules need of a shopper, cached in Redis for SECKILL_SHOPPER_CACHE_TTL;
    from the database alone while that Redis is away."""
    if settings.SECKILL_SHOPPER_CACHE_TTL <= 0 or redis_away():
        return _shopper_facts_load(user_id)
    try:
        raw = cache_redis().get(_shopper_key(user_id))
    except redis.RedisError as exc:
        logger.warning("cache Redis unavailable for shopper %s, reading the database: %s", user_id, exc)
        return _shopper_facts_load(user_id)
    if raw is not None:
        data = json.loads(raw)
        # The date was written by isoformat() (_json_default): it parses.
        return ShopperFacts(data[0], cast(datetime, parse_datetime(data[1]))) if data else None
    facts = _shopper_facts_load(user_id)
    raw = json.dumps([facts.member_level, facts.date_joined] if facts else None, default=str)
    try:
        cache_redis().set(_shopper_key(user_id), raw, ex=settings.SECKILL_SHOPPER_CACHE_TTL)
    except redis.RedisError as exc:  # the answer stands; the next request reads the database again
        logger.warning("shopper %s not cached, Redis unavailable: %s", user_id, exc)
    return facts


def shopper_facts_forget(user_id: int) -> None:
    def forget_now() -> None:
        try:
            cache_redis().delete(_shopper_key(user_id))
        except redis.RedisError as exc:  # the copy then lives out its SECKILL_SHOPPER_CACHE_TTL
            logger.warning("could not drop the cached facts of shopper %s: %s", user_id, exc)

    transaction.on_commit(forget_now)


# --- the staff's edits (admin) ---------------------------------------------------------


def blacklist_entry_save(*, entry) -> None:
    """Save a blacklist entry; web processes apply it within SECKILL_BLACKLIST_CACHE_TTL."""
    entry.full_clean()
    entry.save()
    blacklist_forget()


def blacklist_entries_delete(*, queryset) -> int:
    deleted, _ = queryset.delete()
    blacklist_forget()
    return deleted


def shopper_profile_save(*, profile) -> None:
    profile.save()
    shopper_facts_forget(profile.user_id)
