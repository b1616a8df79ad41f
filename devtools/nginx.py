"""nginx in front of gunicorn, for `make run` and the tests: the repository's own
``deploy/nginx/shop.conf`` with its placeholders filled, inside a small main nginx.conf.

``configure()`` writes, under a prefix directory (``.local/nginx`` for `make run`)::

    nginx.conf   daemon off, pid, error log, temporary paths, events, and an http block
                 with Debian's mime.types and the rendered shop.conf
    shop.conf    deploy/nginx/shop.conf, placeholders filled
    tls.conf     certificate lines when ``tls`` is given (the tests); else empty: plain HTTP
    cache/, tmp/ the page cache (emptied by each configure()) and nginx's temporary files

and checks the whole with ``nginx -t``. ``Front.argv()`` runs nginx in the foreground (the
caller keeps it as a child process and stops it with SIGTERM); ``answers()`` says when it
serves through to the app.

Run as root, nginx's worker processes drop to ``nobody``: nginx itself creates and hands
them the cache and temporary directories, and ``configure()`` checks that they can reach
the static and publish roots (read and search permission for others on the way there).

Production fills the same placeholders (docs/OPERATIONS.md, "The front door")::

    python -m devtools.nginx render LISTEN='443 ssl http2' SERVER_NAME=shop.example.com ... > shop.conf
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
SHOP_CONF = BASE_DIR / "deploy" / "nginx" / "shop.conf"
# Debian's nginx lives in /usr/sbin, which is not on every user's PATH.
SBIN = Path("/usr/sbin/nginx")
MIME_TYPES = Path("/etc/nginx/mime.types")
# The user nginx's worker processes run as when the master runs as root (nginx's own default).
WORKER_USER = "nobody"
PLACEHOLDER = re.compile(r"@@([A-Z_]+)@@")
INSTALL_HINT = "install Debian's nginx (1.22 or later): sudo apt-get install nginx"


class FrontDoorError(RuntimeError):
    """nginx is missing, or its configuration cannot work here: the message says why."""


def binary() -> str:
    """The nginx executable: on the PATH, else Debian's /usr/sbin/nginx."""
    found = shutil.which("nginx") or (str(SBIN) if os.access(SBIN, os.X_OK) else None)
    if not found:
        raise FrontDoorError(f"nginx is not installed (looked on the PATH and at {SBIN}): {INSTALL_HINT}")
    return found


def render(template: str, values: dict[str, str]) -> str:
    """``template`` with each @@NAME@@ replaced by ``values[NAME]``; every placeholder must
    have a value and every value a placeholder (a typo fails here, not in production)."""
    wanted = set(PLACEHOLDER.findall(template))
    missing, unknown = wanted - values.keys(), values.keys() - wanted
    if missing or unknown:
        raise ValueError(f"placeholders without a value: {sorted(missing)}; values without one: {sorted(unknown)}")
    return PLACEHOLDER.sub(lambda match: values[match.group(1)], template)


def placeholders() -> list[str]:
    return sorted(set(PLACEHOLDER.findall(SHOP_CONF.read_text())))


@dataclass(frozen=True)
class Front:
    """A configured nginx: where its files are and how to run it."""

    prefix: Path
    conf: Path
    error_log: Path
    access_log: Path
    base_url: str

    def argv(self, *options: str) -> list[str]:
        return [binary(), "-p", f"{self.prefix}/", "-c", str(self.conf), "-e", str(self.error_log), *options]

    def error_log_tail(self, size: int = 2000) -> str:
        return self.error_log.read_text(errors="replace")[-size:] if self.error_log.exists() else "(no error log)"


def configure(
    prefix: Path,
    *,
    port: int,
    upstream: str,
    static_root: Path,
    publish_root: Path,
    log_dir: Path | None = None,
    tls: str = "",
) -> Front:
    """Write nginx's files under ``prefix`` for a server on 127.0.0.1:``port`` in front of
    ``upstream`` (``host:port`` or ``unix:/path``), check them with ``nginx -t``, and return
    the Front. Logs go to ``log_dir`` (default: ``prefix``). ``tls``: certificate lines
    for tls.conf, and the server speaks HTTPS (as in production)."""
    prefix = prefix.resolve()
    log_dir = (log_dir or prefix).resolve()
    # The cache lives as long as one run: a page cached before a restart (another database,
    # say) is not served after it.
    shutil.rmtree(prefix / "cache", ignore_errors=True)
    for folder in (prefix, prefix / "cache", prefix / "tmp", log_dir):
        folder.mkdir(parents=True, exist_ok=True)
    as_root = os.geteuid() == 0
    if as_root:
        for needed in (prefix / "cache", prefix / "tmp", static_root, publish_root):
            _reachable_by_others(needed)
    tls_conf = prefix / "tls.conf"
    tls_conf.write_text(tls or "# No TLS: plain HTTP on loopback (production: docs/OPERATIONS.md, 'The front door').\n")
    shop = prefix / "shop.conf"
    shop.write_text(
        render(
            SHOP_CONF.read_text(),
            {
                "LISTEN": f"127.0.0.1:{port}" + (" ssl" if tls else ""),
                "SERVER_NAME": "localhost",
                "TLS_CONF": str(tls_conf),
                "UPSTREAM": upstream,
                "STATIC_ROOT": str(Path(static_root).resolve()),
                "PUBLISH_ROOT": str(Path(publish_root).resolve()),
                "CACHE_DIR": str(prefix / "cache"),
            },
        )
    )
    front = Front(
        prefix=prefix,
        conf=prefix / "nginx.conf",
        error_log=log_dir / "nginx-error.log",
        access_log=log_dir / "nginx-access.log",
        base_url=f"{'https' if tls else 'http'}://127.0.0.1:{port}",
    )
    front.conf.write_text(_main_conf(front, shop=shop, as_root=as_root))
    checked = subprocess.run(front.argv("-t", "-q"), capture_output=True, text=True, check=False)
    if checked.returncode != 0:
        raise FrontDoorError(f"nginx refused its configuration ({front.conf}):\n{checked.stderr.strip()}")
    return front


def _main_conf(front: Front, *, shop: Path, as_root: bool) -> str:
    tmp = front.prefix / "tmp"
    user = ""
    if as_root:
        # With its group: `user nobody;` alone means a group named nobody, which Debian lacks.
        group = grp.getgrgid(pwd.getpwnam(WORKER_USER).pw_gid).gr_name
        user = f"user {WORKER_USER} {group};  # the master runs as root; the workers do not\n"
    mime = f"include {MIME_TYPES};" if MIME_TYPES.exists() else _FALLBACK_TYPES
    return f"""# Written by devtools/nginx.py for `make run` and the tests; production includes
# deploy/nginx/shop.conf from its own nginx.conf instead (docs/OPERATIONS.md).
daemon off;
{user}worker_processes 1;           # one event loop holds thousands of connections
worker_rlimit_nofile 8192;
pid {front.prefix}/nginx.pid;
error_log {front.error_log} warn;

events {{
    worker_connections 4096;
}}

http {{
    {mime}
    default_type application/octet-stream;
    sendfile on;
    # Every temporary path under the prefix: nginx creates them all at start-up, and the
    # compiled-in ones (/var/lib/nginx) may not exist or not be ours.
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;

    include {shop};
    access_log {front.access_log} shop if=$shop_log_request;  # the polls that went well: not logged
}}
"""


# When Debian's mime.types is missing (an nginx from elsewhere): what the shop serves.
_FALLBACK_TYPES = """types {
        text/html html; text/css css; application/javascript js; application/json json;
        image/svg+xml svg; image/png png; image/x-icon ico; image/jpeg jpg jpeg;
        font/woff2 woff2; font/woff woff; text/plain txt map;
    }"""


def _reachable_by_others(path: Path) -> None:
    """nginx's workers (``nobody``) must search every directory on the way to ``path`` and
    read ``path`` itself (the nearest existing part of it, when it does not exist yet)."""
    path = Path(path).resolve()
    while not path.exists():
        path = path.parent
    for part in (*reversed(path.parents), path):
        mode = part.stat().st_mode
        needs = stat.S_IXOTH | (stat.S_IROTH if part == path else 0)
        if mode & needs != needs:
            raise FrontDoorError(
                f"nginx's worker processes run as {WORKER_USER} (this runs as root) and cannot reach {path}: "
                f"{part} is mode {stat.filemode(mode)}. Give others read and search permission "
                f"(chmod o+rx {part}), or run as a regular user."
            )


def answers(base_url: str, timeout: float = 2.0) -> bool:
    """nginx answers through to the app: the app's own ``GET /api/ping`` (nginx's own
    answer while gunicorn is away is 503 ``busy``, never 200)."""
    try:
        with urllib.request.urlopen(f"{base_url}/api/ping", timeout=timeout) as response:  # noqa: S310 (http only)
            return response.status == 200
    except (OSError, urllib.error.URLError):
        return False


def main(argv: list[str]) -> int:
    """``render NAME=VALUE …``: deploy/nginx/shop.conf with every placeholder filled, on stdout."""
    if len(argv) < 2 or argv[1] != "render":
        print(
            "usage: python -m devtools.nginx render " + " ".join(f"{name}=…" for name in placeholders()),
            file=sys.stderr,
        )
        return 2
    values = dict(arg.split("=", 1) for arg in argv[2:] if "=" in arg)
    try:
        sys.stdout.write(render(SHOP_CONF.read_text(), values))
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
