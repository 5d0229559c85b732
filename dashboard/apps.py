from django.apps import AppConfig
from django.db.backends.signals import connection_created
from django.db.models.signals import post_migrate


class DashboardConfig(AppConfig):
    name = "dashboard"
    verbose_name = "Dashboard"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from dashboard.postgres import use_c_timestamp_parsing
        from dashboard.services import ensure_operators_group

        connection_created.connect(use_c_timestamp_parsing, dispatch_uid="c-timestamp-parsing")

        # After every migrate, so the group also exists on a database created by tests.
        post_migrate.connect(ensure_operators_group, sender=self)
