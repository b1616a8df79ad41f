"""What gunicorn serves (``gunicorn config.asgi:application``, its uvicorn workers from
gunicorn.conf.py): server.app, behind nginx (deploy/nginx/)."""

import os

# Production unless told otherwise: development and tests choose their settings explicitly.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.production")

import django

django.setup(set_prefix=False)

from core.safety import refuse_unsafe_settings  # noqa: E402
from server.app import get_application  # noqa: E402  (imports the models: after django.setup)

application = get_application()
refuse_unsafe_settings()  # Django's checks do not run under gunicorn
