"""The app server behind the front door (nginx, deploy/nginx/): what gunicorn's uvicorn
workers serve, and nothing of the sale's rules.

* ``server.app`` — the ASGI application (``config.asgi``): header names with an underscore
  dropped, every body read on the event loop with a deadline and a cap, the purchase's one
  way into the sale, everything else to Django.
* ``server.handlers`` — Django behind it: one URLconf, two middleware chains.
* ``server.answers`` — the one function that builds the JSON answers the server gives itself.
* ``server.worker`` — gunicorn's worker class: uvicorn with its limits, and the two uvicorn
  lacks (a request head's deadline and size).
"""
