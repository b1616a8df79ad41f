"""What gunicorn serves (``gunicorn config.asgi:application``, uvicorn workers from
gunicorn.conf.py): see config/handlers.py."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")

from config.handlers import get_asgi_application  # after the settings module is chosen

application = get_asgi_application()
