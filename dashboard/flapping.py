"""What "flapping" means: a lease whose holder changed `changes` times or more within `window`.

The Leases pages and the `lease_flapping` alert rule read this one policy, so the page's
count and filter match the incidents. Its defaults are ALERT_FLAP_CHANGES and
ALERT_FLAP_WINDOW_SECONDS; an administrator's threshold and window on the lease_flapping
rule override them. That override lives in the alerts app, which leases must never import,
so alerts registers a provider here (in its AppConfig.ready) and leases asks `flap_policy()`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings


@dataclass(frozen=True, slots=True)
class FlapPolicy:
    changes: int
    window: timedelta

    @classmethod
    def configured(
        cls, changes: int | None = None, window_seconds: int | None = None
    ) -> FlapPolicy:
        """The settings' defaults, overridden by whichever value is set (empty or 0: unset).

        Read at call time rather than import time, so a changed setting applies at once.
        """
        return cls(
            changes=changes or settings.ALERT_FLAP_CHANGES,
            window=timedelta(seconds=window_seconds or settings.ALERT_FLAP_WINDOW_SECONDS),
        )

    def is_flapping(self, changes: int) -> bool:
        return changes >= self.changes


# A SELECT of the admin's (changes, window seconds): no row, or one whose empty values mean
# the settings' defaults. With its parameters.
PolicyQuery = tuple[str, tuple[object, ...]]

_provider: Callable[[], FlapPolicy] = FlapPolicy.configured
_query: Callable[[], PolicyQuery] | None = None


def register_provider(
    provider: Callable[[], FlapPolicy], query: Callable[[], PolicyQuery] | None = None
) -> None:
    """Where the policy in force comes from (the alerts app's lease_flapping rule), and the
    statement that reads the same values, for a page that reads them within its own first
    statement rather than in a round trip of their own (`policy_query`)."""
    global _provider, _query
    _provider, _query = provider, query


def policy_query() -> PolicyQuery | None:
    """The provider's statement (None: settings only, nothing to read). Its values, read at
    the same moment as `flap_policy()` would, give the same policy through `configured`."""
    return _query() if _query is not None else None


def flap_policy() -> FlapPolicy:
    """The policy in force now; one small query when alerts is installed, so ask once per
    request and pass it on."""
    return _provider()
