"""What gunicorn serves (``gunicorn config.asgi:application``, uvicorn workers from
gunicorn.conf.py): see config/handlers.py."""

import os

# Production unless told otherwise: development and tests choose their settings explicitly.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.production")

from config.handlers import get_asgi_application  # after the settings module is chosen
from core.safety import refuse_unsafe_settings

application = get_asgi_application()
refuse_unsafe_settings()  # Django's checks do not run under gunicorn
