"""For contrast only: the production ASGI application without ``TokenApiFastPath``, every
request through a2wsgi to the WSGI stacks (``make bench BENCH_ARGS="--server uvicorn-wsgi …"``),
so that the fast path's own share of the API's figures can be measured."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.production")  # as config.asgi

from config.handlers import get_asgi_application

application = get_asgi_application().app  # what the fast path hands every other request to
