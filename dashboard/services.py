"""Domain functions of the dashboard app: groups, API tokens, worker heartbeats."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, Group, Permission
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext

from dashboard.celery import QUEUES
from dashboard.models import ApiToken, WorkerHeartbeat, hash_api_token
from dashboard.timefmt import when

OPERATORS_GROUP = "operators"
OPERATOR_PERMISSIONS = (("dashboard", "change_clusters"),)
# How often a token's last use is written: every request would turn reads into writes.
TOKEN_LAST_USED_RESOLUTION = timedelta(minutes=1)
# Beat sends a heartbeat every 15 s; a worker is called silent after missing a few.
WORKER_SILENT_AFTER = timedelta(seconds=60)


def ensure_operators_group(**_: Any) -> None:
    """Create the `operators` group with the permissions for actions that change clusters."""
    group, _created = Group.objects.get_or_create(name=OPERATORS_GROUP)
    for app_label, codename in OPERATOR_PERMISSIONS:
        permission = Permission.objects.filter(
            content_type__app_label=app_label, codename=codename
        ).first()
        if permission is not None:
            group.permissions.add(permission)


def can_change_clusters(user: AbstractBaseUser) -> bool:
    return user.has_perm("dashboard.change_clusters")


def issue_api_token(
    user: AbstractBaseUser, *, name: str = "", scope: str = ApiToken.Scope.READ
) -> tuple[ApiToken, str]:
    """A new token for ``user`` and its plain text (shown once).

    A write token is only issued to an operator: handing one to a user who could never
    use it would leave a credential that starts working the day the user joins operators.
    """
    if ApiToken.Scope(scope) == ApiToken.Scope.WRITE and not can_change_clusters(user):
        raise PermissionDenied(
            gettext(
                "%(username)r is not an operator (the operators group or the"
                " dashboard.change_clusters permission), so it cannot have a write token."
            )
            % {"username": user.get_username()}
        )
    return ApiToken.issue(user, name=name, scope=scope)


def authenticate_api_token(plain: str) -> ApiToken | None:
    """The active token for this plain text, or None; records when it was last used."""
    token = (
        ApiToken.objects.active()
        .select_related("user")
        .filter(token_hash=hash_api_token(plain))
        .first()
    )
    if token is None:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > TOKEN_LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


@transaction.atomic
def record_worker_heartbeat(queue: str, worker: str) -> WorkerHeartbeat:
    heartbeat, _ = WorkerHeartbeat.objects.update_or_create(
        queue=queue, defaults={"seen_at": timezone.now(), "worker": worker[:200]}
    )
    return heartbeat


def worker_status(queues: tuple[str, ...] = QUEUES) -> list[dict[str, Any]]:
    """Per queue (every queue beat sends a heartbeat to): when a worker last ran a task, and
    whether that is too long ago."""
    seen = {beat.queue: beat for beat in WorkerHeartbeat.objects.filter(queue__in=queues)}
    now = timezone.now()
    status = []
    for queue in queues:
        beat = seen.get(queue)
        status.append(
            {
                "queue": queue,
                "seen_at": beat.seen_at if beat else None,
                # Shown as its age, in the reader's language, with the exact UTC on hover.
                "seen": when(beat.seen_at, now) if beat else None,
                "age_seconds": beat.age_seconds(now) if beat else None,
                "silent": beat is None or now - beat.seen_at > WORKER_SILENT_AFTER,
            }
        )
    return status
