"""`metav1.Status` failures, shaped exactly like a real kube-apiserver's.

Clients branch on `code` and `reason` (and sometimes parse `message`), so every body here
follows the captures in `fixtures/kube-apiserver-1.24/` and the apiserver's own wording.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

GROUP = "coordination.k8s.io"


def status_body(
    code: int,
    reason: str,
    message: str,
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A failure Status; key order follows the apiserver's JSON encoding."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


class ApiError(Exception):
    """An answer the fake API server gives as a Status object with an HTTP status code."""

    def __init__(self, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        super().__init__(body["message"])
        self.body = body
        self.headers = headers or {}

    @property
    def code(self) -> int:
        return int(self.body["code"])

    @property
    def reason(self) -> str:
        return str(self.body["reason"])


def _resource_details(plural: str, name: str | None, group: str = GROUP) -> dict[str, Any]:
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:  # omitempty: the core group ("") is not written
        details["group"] = group
    details["kind"] = plural
    return details


def _qualified(plural: str, group: str) -> str:
    """How messages name a resource: `leases.coordination.k8s.io`, but plain `nodes`."""
    return f"{plural}.{group}" if group else plural


def not_found(plural: str, name: str, group: str = GROUP) -> ApiError:
    return ApiError(
        status_body(
            404,
            "NotFound",
            f'{_qualified(plural, group)} "{name}" not found',
            _resource_details(plural, name, group),
        )
    )


def path_not_found() -> ApiError:
    # What the apiserver answers for a group, version or resource it does not serve.
    return ApiError(
        status_body(404, "NotFound", "the server could not find the requested resource", {})
    )


def already_exists(plural: str, name: str, group: str = GROUP) -> ApiError:
    return ApiError(
        status_body(
            409,
            "AlreadyExists",
            f'{_qualified(plural, group)} "{name}" already exists',
            _resource_details(plural, name, group),
        )
    )


def conflict(plural: str, name: str, cause: str | None = None, group: str = GROUP) -> ApiError:
    cause = cause or (
        "the object has been modified; please apply your changes to the latest version "
        "and try again"
    )
    return ApiError(
        status_body(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {_qualified(plural, group)} "{name}": {cause}',
            _resource_details(plural, name, group),
        )
    )


@dataclass(frozen=True, slots=True)
class FieldError:
    """One entry of a 422 Invalid answer (`field.Error` in the apiserver)."""

    field: str
    cause_reason: str  # FieldValueInvalid, FieldValueRequired, ...
    detail: str  # "Invalid value: 0: must be greater than 0"

    def __str__(self) -> str:
        return f"{self.field}: {self.detail}"


def invalid_value(field: str, value: Any, why: str) -> FieldError:
    shown = f'"{value}"' if isinstance(value, str) else str(value)
    return FieldError(field, "FieldValueInvalid", f"Invalid value: {shown}: {why}")


def required_value(field: str, why: str = "") -> FieldError:
    return FieldError(field, "FieldValueRequired", "Required value" + (f": {why}" if why else ""))


def forbidden_value(field: str, why: str) -> FieldError:
    return FieldError(field, "FieldValueForbidden", f"Forbidden: {why}")


def unsupported_value(field: str, value: str, supported: Sequence[str]) -> FieldError:
    choices = ", ".join(f'"{choice}"' for choice in supported)
    return FieldError(
        field,
        "FieldValueNotSupported",
        f'Unsupported value: "{value}": supported values: {choices}',
    )


def invalid(kind: str, name: str, errors: Sequence[FieldError], group: str = GROUP) -> ApiError:
    # The message lists each distinct problem once (ToAggregate), the causes every one.
    distinct = list(dict.fromkeys(map(str, errors)))
    joined = distinct[0] if len(distinct) == 1 else "[" + ", ".join(distinct) + "]"
    causes = [
        {"reason": error.cause_reason, "message": error.detail, "field": error.field}
        for error in errors
    ]
    # Unlike NotFound/Conflict, Invalid names the Kind ("Lease"), not the resource ("leases").
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details.update(kind=kind, causes=causes)
    return ApiError(
        status_body(
            422, "Invalid", f'{_qualified(kind, group)} "{name}" is invalid: {joined}', details
        )
    )


def bad_request(message: str) -> ApiError:
    return ApiError(status_body(400, "BadRequest", message))


def expired(message: str) -> ApiError:
    return ApiError(status_body(410, "Expired", message))


def resource_version_too_large(requested: int, current: int) -> ApiError:
    # The apiserver's NewTooLargeResourceVersionError: a 504 Timeout with a typed cause, which
    # client-go answers by listing again.
    return ApiError(
        status_body(
            504,
            "Timeout",
            f"Timeout: Too large resource version: {requested}, current: {current}",
            {
                "causes": [
                    {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
                ],
                "retryAfterSeconds": 1,
            },
        )
    )


def method_not_allowed() -> ApiError:
    return ApiError(
        status_body(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
            {},
        )
    )


def unsupported_media_type() -> ApiError:
    # What a 1.24 apiserver answers a PATCH with a content type it has no patcher for.
    return ApiError(status_body(415, "UnsupportedMediaType", "415: Unsupported Media Type", {}))


def unauthorized() -> ApiError:
    return ApiError(status_body(401, "Unauthorized", "Unauthorized"))


def forbidden(
    user: str,
    verb: str,
    plural: str | None,
    namespace: str | None,
    name: str | None,
    path: str,
    *,
    group: str = GROUP,
    subresource: str | None = None,
) -> ApiError:
    if plural is None:
        return ApiError(
            status_body(
                403, "Forbidden", f'forbidden: User "{user}" cannot {verb} path "{path}"', {}
            )
        )
    qualified = _qualified(plural, group)
    subject = f'{qualified} "{name}"' if name else qualified
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    resource = f"{plural}/{subresource}" if subresource else plural
    message = (
        f'{subject} is forbidden: User "{user}" cannot {verb} resource "{resource}" '
        f'in API group "{group}" {scope}'
    )
    return ApiError(status_body(403, "Forbidden", message, _resource_details(plural, name, group)))


def injected_failure(code: int, retry_after_seconds: int) -> ApiError:
    """The answers a loaded or restarting apiserver gives (priority-and-fairness, etcd down)."""
    if code == 429:
        return ApiError(
            status_body(
                429,
                "TooManyRequests",
                "Too many requests, please try again later.",
                {"retryAfterSeconds": retry_after_seconds},
            ),
            headers={"Retry-After": str(retry_after_seconds)},
        )
    if code == 503:
        return ApiError(
            status_body(
                503, "ServiceUnavailable", "the server is currently unable to handle the request"
            ),
            headers={"Retry-After": str(retry_after_seconds)},
        )
    if code == 504:
        return ApiError(
            status_body(
                504,
                "Timeout",
                "Timeout: request did not complete within the allotted timeout",
                {"retryAfterSeconds": retry_after_seconds},
            )
        )
    if code == 500:
        return ApiError(
            status_body(
                500,
                "InternalError",
                "Internal error occurred: etcdserver: request timed out",
                {"causes": [{"message": "etcdserver: request timed out"}]},
            )
        )
    raise ValueError(f"cannot inject HTTP {code}; choose 429, 500, 503 or 504")
