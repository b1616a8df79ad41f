"""The configuration as production fills it (devtools.nginx render, TLS in front), and what
`make run` does without nginx."""

import http.client
import shutil
import ssl
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from devtools import nginx, stack

from ..helpers import BASE_DIR, FrontProcess, free_port, wait_until

PRODUCTION = {
    "LISTEN": "443 ssl http2",
    "SERVER_NAME": "shop.example.com",
    "TLS_CONF": "/etc/nginx/shop-tls.conf",
    "UPSTREAM": "unix:/run/shop/gunicorn.sock",
    "STATIC_ROOT": "/srv/shop/staticfiles",
    "PUBLISH_ROOT": "/srv/shop/publish",
    "CACHE_DIR": "/var/cache/nginx/shop",
}


def test_render_fills_every_placeholder_and_refuses_a_missing_or_unknown_one():
    assert sorted(PRODUCTION) == nginx.placeholders()
    done = subprocess.run(
        [sys.executable, "-m", "devtools.nginx", "render", *(f"{k}={v}" for k, v in PRODUCTION.items())],
        cwd=BASE_DIR,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "@@" not in done.stdout
    assert "listen 443 ssl http2;" in done.stdout and "server unix:/run/shop/gunicorn.sock;" in done.stdout
    with pytest.raises(ValueError, match="CACHE_DIR"):
        nginx.render(nginx.SHOP_CONF.read_text(), {k: v for k, v in PRODUCTION.items() if k != "CACHE_DIR"})
    with pytest.raises(ValueError, match="CACHE_DIRR"):
        nginx.render(nginx.SHOP_CONF.read_text(), {**PRODUCTION, "CACHE_DIRR": "/typo"})


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("openssl"), reason="needs the openssl command for a throw-away certificate")
def test_over_https_the_app_is_told_the_scheme_was_https(upstream, process_logs):
    (BASE_DIR / ".local").mkdir(exist_ok=True)
    prefix = Path(tempfile.mkdtemp(prefix="front-test-", dir=BASE_DIR / ".local"))
    prefix.chmod(0o755)
    cert, key = prefix / "cert.pem", prefix / "key.pem"
    certificate = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost"]
    subprocess.run([*certificate, "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    front = nginx.configure(
        prefix,
        port=free_port(),
        upstream=upstream.address,
        static_root=prefix,
        publish_root=prefix,
        log_dir=process_logs,
        tls=f"ssl_certificate {cert};\nssl_certificate_key {key};\nssl_protocols TLSv1.2 TLSv1.3;\n",
    )
    process = FrontProcess(front, process_logs, static_root=prefix, publish_root=prefix).start()
    try:
        port = int(front.base_url.rsplit(":", 1)[1])
        unverified = ssl._create_unverified_context()  # noqa: S323 (the throw-away certificate above)

        def get():
            conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=unverified)
            try:
                conn.request("GET", "/api/ping", headers={"X-Forwarded-Proto": "http"})
                return conn.getresponse().status
            except OSError:
                return None
            finally:
                conn.close()

        assert wait_until(get, timeout=30, what="nginx to answer over HTTPS") == 200
        assert upstream.requests[-1].header("X-Forwarded-Proto") == ["https"]
    finally:
        process.stop()


def test_make_run_says_so_and_starts_nothing_when_nginx_cannot_be_found(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(nginx, "SBIN", tmp_path / "no-nginx")
    monkeypatch.setenv("PATH", str(tmp_path))
    started = []
    monkeypatch.setattr(stack.embedded, "ensure_services", lambda *a, **k: started.append("services") or {})
    assert stack.main() == 1
    said = capsys.readouterr().out
    assert "nginx is not installed" in said and "apt-get install nginx" in said, said
    assert started == []  # not even the embedded servers
