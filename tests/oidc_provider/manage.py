#!/usr/bin/env python
"""The test OpenID provider's manage.py; run from this folder (see server.py)."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "op_site.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
