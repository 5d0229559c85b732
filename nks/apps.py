from django.apps import AppConfig


class NksConfig(AppConfig):
    name = "nks"
    verbose_name = "NKS clusters"
