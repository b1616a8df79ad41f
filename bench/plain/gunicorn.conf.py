"""gunicorn's settings for the yardstick (bench/yardstick.py passes ``-c`` this file, so the
project's gunicorn.conf.py is not read): gunicorn's defaults but for the two workers; the
bind, worker class and threads come as flags. No access log (gunicorn's default)."""

workers = 2
