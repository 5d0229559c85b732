from django.apps import AppConfig
from django.db.models.signals import post_migrate


class AlertsConfig(AppConfig):
    name = "alerts"
    verbose_name = "Alerts"

    def ready(self) -> None:
        from alerts import metrics
        from alerts.rules import ensure_rule_rows

        metrics.register()
        # After every migrate (and test database flush), one admin row per rule.
        post_migrate.connect(ensure_rule_rows, sender=self)
