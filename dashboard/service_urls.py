"""URL fields that also take single-label host names.

Django's URLValidator wants a dotted domain (or "localhost"), so the host names an operator
really gives inside a compose project or a cluster (`http://nks-proxy:8080`, a Service's
short name) were refused as NKS URLs. These fields accept such a host, one DNS label of
letters, digits and hyphens, and check everything else of the URL exactly as Django does.
Which hosts the dashboard may then reach is decided elsewhere (the outbound rules of each
client), not by the URL's spelling.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django import forms
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import models

# One DNS label (RFC 1123): what a compose service or a Kubernetes Service is called.
SINGLE_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?", re.IGNORECASE)
# Stands in for the missing domain while Django's validator checks the rest of the URL.
STAND_IN_DOMAIN = ".example"


class ServiceURLValidator(URLValidator):
    def __call__(self, value: Any) -> None:
        try:
            super().__call__(value)
        except ValidationError:
            try:
                parts = urlsplit(str(value))
            except ValueError:
                raise ValidationError(
                    self.message, code=self.code, params={"value": value}
                ) from None
            userinfo, at, host_port = parts.netloc.rpartition("@")
            host, colon, port = host_port.partition(":")
            if not SINGLE_LABEL.fullmatch(host):
                raise
            netloc = f"{userinfo}{at}{host}{STAND_IN_DOMAIN}{colon}{port}"
            super().__call__(urlunsplit(parts._replace(netloc=netloc)))


class ServiceURLFormField(forms.URLField):
    default_validators = [ServiceURLValidator()]


class ServiceURLField(models.URLField):
    default_validators = [ServiceURLValidator()]

    def formfield(self, **kwargs: Any) -> Any:
        return super().formfield(**{"form_class": ServiceURLFormField, **kwargs})
