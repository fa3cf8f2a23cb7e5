#!/usr/bin/env python
"""Django's command-line utility for raywatch."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except Exception as exc:
        from dashboard.envconf import ConfigError

        if isinstance(exc, ConfigError):
            sys.exit(f"raywatch: bad setting: {exc}")
        raise


if __name__ == "__main__":
    main()
