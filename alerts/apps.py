from django.apps import AppConfig
from django.db.models.signals import post_migrate


class AlertsConfig(AppConfig):
    name = "alerts"
    verbose_name = "Alerts"

    def ready(self) -> None:
        from alerts import deadman, metrics
        from alerts.lease_rules import lease_flapping_policy, lease_flapping_policy_query
        from alerts.rules import ensure_rule_rows
        from dashboard import flapping

        metrics.register()
        deadman.register()
        # The Leases pages judge flapping by the lease_flapping rule's threshold and window.
        flapping.register_provider(lease_flapping_policy, lease_flapping_policy_query)
        # After every migrate (and test database flush), one admin row per rule.
        post_migrate.connect(ensure_rule_rows, sender=self)
