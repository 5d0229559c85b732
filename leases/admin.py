from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from dashboard.admin import WriteOnlySecretsAdmin
from leases import kube
from leases.models import KubeCluster, LeaderGroup, Lease, LeaseCandidate, LeaseTransition


class KubeClusterForm(forms.ModelForm):
    """The kubeconfig is write-only: never rendered back, kept when left empty."""

    kubeconfig = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 8, "autocomplete": "off", "spellcheck": "false"}),
        help_text=_(
            "Paste a kubeconfig to set or replace it. It is stored as a secret and never "
            "shown again; leave empty to keep the current one."
        ),
    )

    class Meta:
        model = KubeCluster
        fields = ["name", "enabled", "source", "kubeconfig", "context"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.initial["kubeconfig"] = ""

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        source = data.get("source")
        text = data.get("kubeconfig") or ""
        context = data.get("context") or ""
        self.config_warnings: tuple[str, ...] = ()
        if source == KubeCluster.Source.KUBECONFIG:
            stored = self.instance.kubeconfig if self.instance.pk else ""
            if not text and not stored:
                self.add_error("kubeconfig", gettext("A kubeconfig is required for this source."))
            elif text:
                try:
                    self.config_warnings = kube.parse_kubeconfig(text, context).warnings
                except kube.KubeError as error:
                    self.add_error("kubeconfig", error.message)
            else:
                # Kept as stored: re-read its warnings for the (maybe changed) context. One
                # that is now refused still saves, so it can be disabled; its watcher
                # refuses to use it and says why.
                try:
                    self.config_warnings = kube.parse_kubeconfig(stored, context).warnings
                except kube.KubeError:
                    self.config_warnings = (self.instance.config_warning,)
        return data

    def save(self, commit: bool = True) -> KubeCluster:
        cluster = super().save(commit=False)
        text = self.cleaned_data.get("kubeconfig") or ""
        if cluster.source == KubeCluster.Source.IN_CLUSTER:
            cluster.kubeconfig = ""
        elif not text and cluster.pk:
            cluster.kubeconfig = KubeCluster.objects.get(pk=cluster.pk).kubeconfig
        cluster.config_warning = " ".join(getattr(self, "config_warnings", ()))
        if text or cluster.source == KubeCluster.Source.IN_CLUSTER:
            cluster.nks_api_address = ""  # the operator's own now: its host is theirs to choose
        if commit:
            cluster.save()
        return cluster


# What the watcher writes: shown, never edited.
WATCHER_STATUS_FIELDS = (
    "watcher_id",
    "connected",
    "connected_since",
    "last_event_at",
    "last_flush_at",
    "last_list_at",
    "resource_version",
    "events_per_second",
    "events_total",
    "reconnects_total",
    "relists_total",
    "lag_seconds",
    "last_error",
    "last_error_at",
    "config_warning",
    "nks_api_address",
    "skipped_objects_total",
    "leases_cut_total",
    "leases_last_cut",
    "leases_last_cut_bytes",
    "leases_last_cut_at",
    "candidates_api",
    "candidates_problem",
    "nodes_watch",
    "nodes_connected_since",
    "nodes_last_list_at",
    "nodes_last_event_at",
    "nodes_resource_version",
    "nodes_events_total",
    "nodes_relists_total",
    "nodes_reconnects_total",
    "nodes_lag_seconds",
    "nodes_last_error",
    "nodes_last_error_at",
    "nodes_cut_total",
    "nodes_last_cut",
    "nodes_last_cut_bytes",
    "nodes_last_cut_at",
    "candidates_cut",
    "candidates_last_cut",
    "candidates_last_cut_bytes",
)


@admin.register(KubeCluster)
class KubeClusterAdmin(WriteOnlySecretsAdmin):
    form = KubeClusterForm
    list_display = ("name", "enabled", "source", "connected", "last_event_at", "last_error")
    list_filter = ("enabled", "source", "connected")
    search_fields = ("name",)
    readonly_fields = WATCHER_STATUS_FIELDS
    fields = ("name", "enabled", "source", "kubeconfig", "context", *WATCHER_STATUS_FIELDS)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Observed data: the API server owns it, so admin only shows it."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(Lease)
class LeaseAdmin(ReadOnlyAdmin):
    list_display = (
        "namespace",
        "name",
        "cluster",
        "lease_class",
        "holder",
        "renew_time",
        "deleted_at",
    )
    list_filter = ("cluster", "lease_class")
    search_fields = ("namespace", "name", "holder")
    list_select_related = ("cluster",)


@admin.register(LeaseTransition)
class LeaseTransitionAdmin(ReadOnlyAdmin):
    list_display = ("lease", "from_holder", "to_holder", "observed_at", "missed")
    list_select_related = ("lease",)


@admin.register(LeaseCandidate)
class LeaseCandidateAdmin(ReadOnlyAdmin):
    list_display = ("namespace", "name", "lease_name", "cluster", "binary_version", "renew_time")
    list_filter = ("cluster",)


@admin.register(LeaderGroup)
class LeaderGroupAdmin(admin.ModelAdmin):
    """What an admin knows of a leader-k8s group that its leases do not say: its size.

    The name is the lock name (the slot leases are `<name>-slot-<n>`); a row for a group no
    lease belongs to does no harm, it only waits for the group to appear.
    """

    list_display = ("name", "namespace", "cluster", "expected_size", "created_at")
    list_filter = ("cluster",)
    search_fields = ("namespace", "name")
    list_select_related = ("cluster",)
    fields = ("cluster", "namespace", "name", "expected_size")
