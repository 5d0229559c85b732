from django.apps import AppConfig


class NksConfig(AppConfig):
    name = "nks"
    verbose_name = "NKS clusters"

    def ready(self) -> None:
        from nks import metrics

        metrics.register()
