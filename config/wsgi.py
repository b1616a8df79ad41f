import os

# Production unless told otherwise: development and tests choose their settings explicitly.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.production")

from core.safety import refuse_unsafe_settings
from server.handlers import get_application  # after the settings module is chosen

application = get_application()
refuse_unsafe_settings()  # Django's checks do not run under a WSGI server
