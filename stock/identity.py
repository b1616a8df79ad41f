"""Which Redis state a sale's stock lives in, and whether that Redis can keep it.

A warm-up writes a fresh *epoch* beside every shard's stock (warmup.lua, in the same step)
and the sale records it in the database together with the identity of the server that
holds each shard (its ``run_id`` and replication id). Anything that silently replaces the
state — an AOF ``everysec`` loss or an RDB restore (the server restarted: a new run id), a
failover to a replica that missed writes (a new primary, a new replication id), a flush or
an eviction (the epoch key gone), a restore of a snapshot from an earlier warm-up (another
epoch) — shows as a difference from the record, and the sale re-derives the stock from the
database before selling again (seckill.sale.lifecycle.activity_identity_check).

A Redis that may evict keys or keeps nothing on disk can lose a reservation without any
trace; warm-up and start-up refuse one unless SECKILL_ALLOW_VOLATILE_REDIS is true (tests,
benchmarks).
"""

from __future__ import annotations

import uuid
from typing import Any

import redis

from .layout import StockLayout
from .redis_client import StockRedis


def new_epoch() -> str:
    return uuid.uuid4().hex


def _node_info(client: StockRedis, key: str, section: str) -> dict[str, Any]:
    if isinstance(client, redis.RedisCluster):
        node = client.get_node_from_key(key)
        return dict(client.info(section, target_nodes=node))
    return dict(client.info(section))


def _config(client: StockRedis, key: str, name: str) -> str:
    if isinstance(client, redis.RedisCluster):
        node = client.get_node_from_key(key)
        reply = client.config_get(name, target_nodes=node)
    else:
        reply = client.config_get(name)
    value = reply.get(name, "") if isinstance(reply, dict) else ""
    return value.decode() if isinstance(value, bytes) else str(value)


def server_identity(client: StockRedis, key: str) -> str:
    """The server holding ``key``: "<run id>:<replication id>" (both change on a restart,
    a restore or a failover)."""
    server = _node_info(client, key, "server")
    replication = _node_info(client, key, "replication")
    return f"{server.get('run_id', '')}:{replication.get('master_replid', '')}"


def stock_identity(client: StockRedis, layout: StockLayout) -> dict[str, Any]:
    """What the database records after a warm-up: the epoch of each shard (None: no epoch
    key) and the identity of each shard's server."""
    epochs = [client.get(keys.epoch) for keys in layout.shard_keys]
    return {
        "epochs": [e.decode() if isinstance(e, bytes) else e for e in epochs],
        "servers": [server_identity(client, keys.stock) for keys in layout.shard_keys],
    }


def identity_differences(recorded: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """Why the Redis state now is not the one the warm-up recorded (empty: the same)."""
    if not recorded:
        return []  # warmed before identities were recorded: nothing to compare with
    reasons = []
    for shard, (then, current) in enumerate(zip(recorded.get("epochs", []), now["epochs"], strict=False)):
        if current != then:
            reasons.append(f"shard {shard}: epoch {current!r}, warmed as {then!r}")
    for shard, (then, current) in enumerate(zip(recorded.get("servers", []), now["servers"], strict=False)):
        if current != then:
            reasons.append(f"shard {shard}: server {current}, warmed on {then}")
    return reasons


def volatile_reasons(client: StockRedis, layout: StockLayout | None = None) -> list[str]:
    """Why this Redis may lose the stock without a trace: it may evict keys, or it keeps
    nothing on disk. Empty when it is safe (or when CONFIG is not allowed: a managed Redis
    whose settings cannot be read is taken as configured by its operator)."""
    keys = [k.stock for k in layout.shard_keys] if layout is not None else ["seckill:probe"]
    reasons: list[str] = []
    for key in keys:
        try:
            policy = _config(client, key, "maxmemory-policy")
            appendonly = _config(client, key, "appendonly")
            save = _config(client, key, "save")
        except redis.ResponseError:
            continue
        if policy and policy != "noeviction":
            reasons.append(f"maxmemory-policy is {policy} (set noeviction)")
        if appendonly != "yes" and not save.strip():
            reasons.append("nothing is kept on disk (set appendonly yes, or a save schedule)")
    return sorted(set(reasons))
