from __future__ import annotations

from django.apps import AppConfig


class FakesConfig(AppConfig):
    # An app only so `manage.py fake_apiserver` and `manage.py fake_nks` are found; no models.
    name = "fakes"
    verbose_name = "Fake outside systems (demo and tests)"
