import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")

from config.handlers import get_application  # after the settings module is chosen

application = get_application()
