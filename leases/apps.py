from django.apps import AppConfig


class LeasesConfig(AppConfig):
    name = "leases"
    verbose_name = "Kubernetes Leases"

    def ready(self) -> None:
        from leases import metrics, watcher_metrics

        metrics.register()
        watcher_metrics.register()
