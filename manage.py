#!/usr/bin/env python
import os
import sys


def main() -> None:
    # Production unless told otherwise: `make run` / `make manage` and the tests choose theirs.
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.production")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
