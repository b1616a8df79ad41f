"""gunicorn's worker class (gunicorn.conf.py): uvicorn's, configured for this app."""

from uvicorn_worker import UvicornWorker as _UvicornWorker


class UvicornWorker(_UvicornWorker):
    """uvloop and httptools by name, not "auto": a machine without them fails at start-up
    instead of serving at a fraction of the speed. No proxy-header rewriting: uvicorn
    would take the client's address and scheme from ``X-Forwarded-*`` sent from a trusted
    peer; the app decides which proxy it trusts (``SECKILL_TRUSTED_PROXY_HEADER``,
    ``SECURE_PROXY_SSL_HEADER``), so ``REMOTE_ADDR`` stays the socket's, as under any
    WSGI server."""

    CONFIG_KWARGS = {"loop": "uvloop", "http": "httptools", "proxy_headers": False}
