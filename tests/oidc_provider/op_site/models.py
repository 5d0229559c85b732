"""What the test provider knows beyond Django's user row."""

from django.conf import settings
from django.db import models


class Profile(models.Model):
    """A `preferred_username` other than the login name: providers let people change it."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    preferred_username = models.CharField(max_length=200, blank=True)

    def __str__(self) -> str:
        return f"{self.user}: {self.preferred_username}"
