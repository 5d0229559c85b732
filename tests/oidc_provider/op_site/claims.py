"""Claims of the test provider: standard ones from the user row, and a `groups` claim."""

from typing import Any

from oidc_provider.lib.claims import ScopeClaims
from op_site.models import Profile


def userinfo(claims: dict[str, Any], user: Any) -> dict[str, Any]:
    profile = Profile.objects.filter(user=user).first()
    claims["preferred_username"] = (profile and profile.preferred_username) or user.username
    claims["email"] = user.email
    claims["email_verified"] = True
    claims["given_name"] = user.first_name
    claims["family_name"] = user.last_name
    return claims


class GroupsScopeClaims(ScopeClaims):
    """The `groups` scope: the names of the user's groups at this provider."""

    def scope_groups(self) -> dict[str, Any]:
        return {"groups": sorted(self.user.groups.values_list("name", flat=True))}
