"""Forms: the resize form (page and API), the audit filter, and the account form in admin."""

from __future__ import annotations

from collections import Counter
from typing import Any

from django import forms
from django.conf import settings
from django.core.validators import MaxLengthValidator, MaxValueValidator
from django.utils.choices import CallableChoiceIterator

from nks.models import NksAccount, NksCluster, NksNodegroup, ResizeRequest, ResizeState


def node_label(node: dict[str, Any], expired: set[str]) -> str:
    name = node.get("name") or node.get("address") or node.get("uuid")
    notes = []
    if node.get("address") and node.get("name"):
        notes.append(str(node["address"]))
    if node.get("ready") is False:
        notes.append("NotReady")
    if node.get("name") in expired:
        notes.append("heartbeat lease expired")
    return f"{name} ({', '.join(notes)})" if notes else str(name)


class ResizeForm(forms.Form):
    """A resize of one nodegroup, validated against what the dashboard knows of it.

    ``require_confirmation`` (the page, not the API) asks for the nodegroup's name typed out
    when scaling in. ``nodes_to_remove`` offers the nodes whose instance uuid is known;
    NotReady nodes and nodes whose heartbeat Lease expired are pre-selected.
    """

    node_count = forms.IntegerField(
        label="Target node count",
        min_value=1,
        error_messages={"required": "Give the number of nodes the nodegroup should have."},
    )
    nodes_to_remove = forms.MultipleChoiceField(
        label="Nodes to remove",
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="When scaling in, choose exactly the nodes to remove; otherwise NKS picks "
        "random ones.",
    )
    reason = forms.CharField(
        max_length=1000,
        widget=forms.Textarea(attrs={"rows": 2}),
        error_messages={"required": "Say why: the reason is kept in the audit."},
    )
    confirm_name = forms.CharField(
        label="Type the nodegroup name to confirm removing nodes",
        required=False,
        max_length=255,
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )

    def __init__(
        self,
        *args: Any,
        nodegroup: NksNodegroup,
        expired_nodes: set[str] | None = None,
        require_confirmation: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.nodegroup = nodegroup
        self.require_confirmation = require_confirmation
        self.max_nodes = settings.NKS_MAX_NODES_PER_NODEGROUP
        expired = expired_nodes or set()
        self.removable = [node for node in nodegroup.nodes if node.get("uuid")]
        self.fields["nodes_to_remove"].choices = [
            (node["uuid"], node_label(node, expired)) for node in self.removable
        ]
        count = self.fields["node_count"]
        count.max_value = self.max_nodes
        count.validators.append(MaxValueValidator(self.max_nodes))
        self.fields["node_count"].widget.attrs.update({"min": 1, "max": self.max_nodes})
        if not self.is_bound:
            self.initial.setdefault("node_count", nodegroup.node_count)
            self.initial.setdefault(
                "nodes_to_remove",
                [
                    node["uuid"]
                    for node in self.removable
                    if node.get("ready") is False or node.get("name") in expired
                ],
            )
        if not require_confirmation:
            del self.fields["confirm_name"]

    def refusal(self) -> str | None:
        """Why no resize can be asked for right now, whatever the numbers."""
        group = self.nodegroup
        cluster: NksCluster = group.cluster
        if group.gone_at is not None or cluster.gone_at is not None:
            return "This nodegroup is gone from NKS."
        if not group.is_worker:
            return f"Only worker nodegroups can be resized; {group.name} is {group.role or '?'}."
        if group.in_progress:
            return f"Nodegroup {group.name} is {group.status}: wait for that operation to finish."
        if cluster.in_progress:
            return f"Cluster {cluster.name} is {cluster.status}: wait for that operation to finish."
        if group.autoscaler_enabled:
            return (
                f"The cluster autoscaler is enabled on {group.name}: it sets the node count. "
                "Turn it off in NKS to resize by hand."
            )
        return None

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        refusal = self.refusal()
        if refusal:
            raise forms.ValidationError(refusal, code="refused")
        target = data.get("node_count")
        if target is None:
            return data
        group = self.nodegroup
        current = group.node_count
        if group.min_node_count is not None and target < group.min_node_count:
            self.add_error(
                "node_count",
                f"{group.name} has a minimum of {group.min_node_count} nodes.",
            )
            return data
        if group.max_node_count is not None and target > group.max_node_count:
            self.add_error(
                "node_count", f"{group.name} has a maximum of {group.max_node_count} nodes."
            )
            return data
        if current is None:
            raise forms.ValidationError("The nodegroup's current size is unknown; wait for a poll.")
        if target == current:
            self.add_error("node_count", f"{group.name} already has {current} nodes: no change.")
            return data
        chosen: list[str] = data.get("nodes_to_remove") or []
        # Checkboxes cannot repeat a node, but a crafted POST or an API body can: "a, a"
        # would pass "choose exactly 2" and name one node for two removals.
        repeated = [node for node, times in Counter(chosen).items() if times > 1]
        if repeated:
            self.add_error(
                "nodes_to_remove",
                f"{', '.join(repeated)} {'is' if len(repeated) == 1 else 'are'} chosen more "
                "than once: choose each node to remove once.",
            )
            return data
        if target > current:
            if chosen:
                self.add_error("nodes_to_remove", "Nodes can only be removed when scaling in.")
            return data
        removing = current - target
        if self.removable and len(chosen) != removing:
            self.add_error(
                "nodes_to_remove",
                f"Going from {current} to {target} removes {removing} node"
                f"{'s' if removing != 1 else ''}: choose exactly {removing} "
                f"(chosen: {len(chosen)}).",
            )
        if self.require_confirmation and data.get("confirm_name", "").strip() != group.name:
            self.add_error(
                "confirm_name",
                f"Removing nodes needs confirmation: type {group.name} exactly.",
            )
        return data

    def errors_json(self) -> dict[str, list[str]]:
        return {field: [str(error) for error in errors] for field, errors in self.errors.items()}


def resized_cluster_choices() -> list[tuple[str, str]]:
    """Clusters that have resizes, by name. Called when the filter bar is drawn."""
    clusters = NksCluster.objects.filter(resizes__isnull=False).order_by("name")
    return [("", "any cluster"), *clusters.values_list("uuid", "name").distinct()]


def resizer_choices() -> list[tuple[str, str]]:
    """Everyone who asked for a resize. Called when the filter bar is drawn."""
    names = ResizeRequest.objects.order_by("username").values_list("username", flat=True)
    return [("", "anyone"), *((name, name) for name in names.distinct())]


class ResizeFilterForm(forms.Form):
    """The audit page's filters: cluster (uuid), user (username) and outcome (state).

    Its selects render themselves (``{{ form.outcome }}``) with ids ``f-<field>``; cluster and
    user are text offered as selects, so one that has no resize matches none, without error.
    Their lengths are validators: ``max_length`` would also write ``maxlength=`` on a select.
    """

    cluster = forms.CharField(
        required=False,
        validators=[MaxLengthValidator(64)],
        widget=forms.Select(choices=CallableChoiceIterator(resized_cluster_choices)),
    )
    user = forms.CharField(
        required=False,
        validators=[MaxLengthValidator(150)],
        widget=forms.Select(choices=CallableChoiceIterator(resizer_choices)),
    )
    outcome = forms.ChoiceField(
        required=False, choices=[("", "any outcome"), ("in_flight", "in flight")]
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("auto_id", "f-%s")
        super().__init__(*args, **kwargs)
        self.fields["outcome"].choices = [
            ("", "any outcome"),
            ("in_flight", "in flight"),
            *ResizeState.choices,
        ]

    def filters(self) -> dict[str, str]:
        data = self.cleaned_data if hasattr(self, "cleaned_data") else {}
        return {key: (data.get(key) or "").strip() for key in ("cluster", "user", "outcome")}


class NksAccountForm(forms.ModelForm):
    """Admin's account form: the password and token are write-only, kept when left empty."""

    password = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Set or replace the password; it is stored as a secret and never shown. "
        "Leave empty to keep the current one.",
    )
    token = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text="A fixed token instead of identity credentials; never shown again. Leave "
        "empty to keep the current one.",
    )
    clear_token = forms.BooleanField(
        required=False, help_text="Remove the stored token (to switch to identity credentials)."
    )
    api_url = forms.URLField(
        label="API URL",
        max_length=300,
        assume_scheme="https",
        help_text="The region's NKS API base URL.",
    )
    identity_url = forms.URLField(
        label="Identity URL",
        max_length=300,
        required=False,
        assume_scheme="https",
        help_text="Identity service base URL (tokens from POST {identity_url}/v2.0/tokens).",
    )

    class Meta:
        model = NksAccount
        fields = ["name", "enabled", "api_url", "identity_url", "tenant_id", "username"]

    # Where the stored secret is sent, and whose it is: changing any of these re-targets it.
    SECRET_DESTINATION_FIELDS = ("api_url", "identity_url", "tenant_id", "username")

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        stored = self.instance
        self._require_secret_when_moved(data)
        token = data.get("token") or ("" if data.get("clear_token") else stored.token)
        password = data.get("password") or stored.password
        identity = [data.get("identity_url"), data.get("tenant_id"), data.get("username")]
        if token:
            if any(identity) or data.get("password"):
                raise forms.ValidationError(
                    "Give either a token or identity credentials, not both. To switch to "
                    "identity credentials, tick “clear token”; to switch to a token, "
                    "empty the identity fields."
                )
            password = ""
        elif not (all(identity) and password):
            raise forms.ValidationError(
                "Give either a token, or all of identity URL, tenant ID, username and password."
            )
        # The model's own checks run on these after clean(): they must see the kept secrets.
        data["password"], data["token"] = password, token
        return data

    def _require_secret_when_moved(self, data: dict[str, Any]) -> None:
        """Refuse to send a stored password or token to a new address without it typed again.

        Otherwise anyone who may edit the account could point it at a server of theirs and
        collect the secret at the next poll.
        """
        stored = self.instance
        if stored.pk is None or not (stored.password or stored.token):
            return
        moved = [
            self.fields[name].label or name
            for name in self.SECRET_DESTINATION_FIELDS
            if name in self.changed_data
        ]
        if not moved:
            return
        what = ", ".join(str(label) for label in moved)
        if stored.token and not data.get("clear_token"):
            if not data.get("token"):
                self.add_error(
                    "token",
                    f"You changed {what}: enter the token again, so the stored one is never "
                    "sent to a new address.",
                )
        elif stored.password and not data.get("password") and not data.get("token"):
            self.add_error(
                "password",
                f"You changed {what}: enter the password again, so the stored one is never "
                "sent to a new address.",
            )

    def save(self, commit: bool = True) -> NksAccount:
        account = super().save(commit=False)
        account.password = self.cleaned_data["password"]
        account.token = self.cleaned_data["token"]
        account.next_poll_at = None
        if commit:
            account.save()
        return account
