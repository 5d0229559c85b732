"""leader-k8s slot groups: the groups page, one group's page, and its expected size."""

from __future__ import annotations

from django import forms
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_POST

from dashboard.htmx import render_page
from leases.groups import leader_group, set_expected_size
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


def group_list(request: HttpRequest) -> HttpResponse:
    return render_page(request, "leases/groups.html", {"page": groups_page(timezone.now())})


def group_page(request: HttpRequest, cluster: str, namespace: str, name: str) -> HttpResponse:
    detail = group_detail(cluster, namespace, name, timezone.now())
    if detail is None:
        raise Http404(_("No such leader group"))
    form = ExpectedSizeForm(initial={"expected_size": detail.row.expected})
    return render_page(
        request, "leases/group_detail.html", {"detail": detail, "group": detail.row, "form": form}
    )


@require_POST
def group_expected_size(
    request: HttpRequest, cluster: str, namespace: str, name: str
) -> HttpResponse:
    # The same people who may change the group's row in admin: staff.
    if not request.user.is_staff:
        raise PermissionDenied(_("Recording a group's expected size needs a staff account."))
    group = leader_group(cluster, namespace, name, timezone.now())
    if group is None:
        raise Http404(_("No such leader group"))
    form = ExpectedSizeForm(request.POST)
    if not form.is_valid():
        detail = group_detail(cluster, namespace, name, timezone.now())
        assert detail is not None  # the group was found a moment ago
        context = {"detail": detail, "group": detail.row, "form": form}
        response = render_page(request, "leases/group_detail.html", context)
        response.status_code = 400
        return response
    set_expected_size(group, form.cleaned_data["expected_size"])
    return redirect("leases:group", cluster=cluster, namespace=namespace, name=name)
