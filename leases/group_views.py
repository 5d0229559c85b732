"""leader-k8s slot groups: the groups page, one group's page, and its expected size."""

from __future__ import annotations

from django import forms
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_http_methods

from dashboard.htmx import render_page
from leases.groups import leader_group, set_expected_size
from leases.models import LeaderGroup
from leases.presenters.groups import group_detail, groups_page


class ExpectedSizeForm(forms.Form):
    """maxLeaders of the group's elector, as an admin knows it; empty clears it.

    Kept beside its one view: leases/forms.py holds the Leases page's filters.
    """

    expected_size = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=10_000,  # leader-k8s slot indexes have at most four digits
        label=_("Expected slots (maxLeaders)"),
    )


def may_record_expected_size(
    user: AbstractBaseUser | AnonymousUser, cluster: str, namespace: str, name: str
) -> bool:
    """The admin's rule for the group's row, so neither place is a way around the other:
    an active staff account with the permission to change leader groups, and to add one
    when the group has no row yet (the page writes with update_or_create)."""
    if not (user.is_active and getattr(user, "is_staff", False)):
        return False
    needed = ["leases.change_leadergroup"]
    exists = LeaderGroup.objects.filter(
        cluster__name=cluster, namespace=namespace, name=name
    ).exists()
    if not exists:
        needed.append("leases.add_leadergroup")
    return user.has_perms(needed)


def group_list(request: HttpRequest) -> HttpResponse:
    cursor = request.GET.get("after") or None
    return render_page(request, "leases/groups.html", {"page": groups_page(timezone.now(), cursor)})


# A refused expected size comes back to the group page in this query parameter (post/
# redirect/get); one short number needs no session. Cut: a crafted POST cannot make it long.
REFUSED_SIZE_PARAMETER = "refused_size"
REFUSED_SIZE_CHARS = 20


def group_page(request: HttpRequest, cluster: str, namespace: str, name: str) -> HttpResponse:
    detail = group_detail(cluster, namespace, name, timezone.now())
    if detail is None:
        raise Http404(_("No such leader group"))
    may_record = may_record_expected_size(request.user, cluster, namespace, name)
    refused = request.GET.get(REFUSED_SIZE_PARAMETER)
    if refused is not None and may_record and not request.htmx:
        # Back from a refused size: the value as typed, with its error beside the field.
        form = ExpectedSizeForm({"expected_size": refused[:REFUSED_SIZE_CHARS]})
        if not form.is_valid():
            # The field takes focus, so its error (aria-describedby) is read with it.
            form.fields["expected_size"].widget.attrs["autofocus"] = True
    else:
        form = ExpectedSizeForm(initial={"expected_size": detail.row.expected})
    return render_page(
        request,
        "leases/group_detail.html",
        {"detail": detail, "group": detail.row, "form": form, "may_record": may_record},
    )


# A form URL answers GET too: a reload or the address bar lands on the group page, never on
# the browser's "HTTP ERROR 405".
@require_http_methods(["GET", "HEAD", "POST"])
def group_expected_size(
    request: HttpRequest, cluster: str, namespace: str, name: str
) -> HttpResponse:
    page = reverse("leases:group", args=[cluster, namespace, name])
    if request.method != "POST":
        return redirect(page)
    group = leader_group(cluster, namespace, name, timezone.now())
    if group is None:
        raise Http404(_("No such leader group"))
    if not may_record_expected_size(request.user, cluster, namespace, name):
        raise PermissionDenied(
            _(
                "Recording a group's expected size needs a staff account that may change "
                "leader groups in admin."
            )
        )
    form = ExpectedSizeForm(request.POST)
    if not form.is_valid():
        typed = request.POST.get("expected_size", "")[:REFUSED_SIZE_CHARS]
        query = urlencode({REFUSED_SIZE_PARAMETER: typed})
        return HttpResponseRedirect(f"{page}?{query}", status=303)
    set_expected_size(group, form.cleaned_data["expected_size"])
    return redirect(page)
