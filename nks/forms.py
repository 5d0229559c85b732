"""Forms: the resize form (page and API), the audit filter, and the account form in admin."""

from __future__ import annotations

from collections import Counter
from typing import Any

from django import forms
from django.conf import settings
from django.core.validators import MaxLengthValidator, MaxValueValidator
from django.forms.boundfield import BoundField
from django.utils.choices import CallableChoiceIterator
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from dashboard.forms import write_only_secret
from dashboard.natural import natural_key
from dashboard.service_urls import ServiceURLFormField
from leases.models import NODEGROUP_LABEL
from nks.models import NksAccount, NksCluster, NksNodegroup, ResizeRequest, ResizeState
from nks.node_picture import NodegroupNodePage, NodegroupNodes, NodeLine


def node_label(node: NodeLine) -> str:
    """A removable node as the form offers it: its name, what is wrong with it, its UUID."""
    # A list of short notes, not a sentence: joined with commas in every language.
    notes = []
    if node.not_ready:
        reason = f": {node.ready_reason}" if node.ready_reason else ""
        # NotReady is the Node condition's own word, kept as Kubernetes writes it.
        notes.append(f"NotReady{reason}" if node.ready else gettext("Ready not reported"))
    if node.heartbeat_expired:
        notes.append(gettext("heartbeat lease expired"))
    if node.cordoned:
        notes.append(gettext("cordoned"))
    state = f" ({', '.join(notes)})" if notes else ""
    return f"{node.name}{state} · {node.instance.uuid}"


# The page's checkboxes offer this many removable nodes, best candidates first, and more only
# when a scale-in pre-selects more; any other removable node is typed by name or instance UUID
# in the text input beside them (`NodeChoices`). A 500-node nodegroup's page lists 25, not 500.
NODES_OFFERED = 25
# The text input's name: nodes_to_remove's own, and this.
TYPED_NODES_SUFFIX = "_more"


class NodeChoices(forms.CheckboxSelectMultiple):
    """Checkboxes for the nodes offered, and the text input ``<name>_more`` for any other:
    the field's value is both, one list, validated by the field against every removable node
    of the nodegroup (names and UUIDs), as a crafted POST or an API body is."""

    def value_from_datadict(self, data: Any, files: Any, name: str) -> Any:
        chosen = super().value_from_datadict(data, files, name)
        typed = data.get(f"{name}{TYPED_NODES_SUFFIX}")
        if not isinstance(typed, str) or not typed.strip():
            return chosen
        return [*(chosen or []), *typed.replace(",", " ").split()]


class NodeChoiceField(forms.MultipleChoiceField):
    """Nodes to remove by instance UUID; a node's name is taken too (the API accepts both).

    ``aliases`` maps each name and UUID a caller may give to the node's instance UUID;
    ``refusals`` says why a node of the cluster that is known but may not be named cannot be
    (no parsable providerID, no nodegroup label), so the error names the reason.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.aliases: dict[str, str] = {}
        self.refusals: dict[str, str] = {}
        self.nodegroup_name = ""
        self.watched = True

    def validate(self, value: Any) -> None:
        if self.required and not value:
            raise forms.ValidationError(self.error_messages["required"], code="required")
        if value and not self.watched:
            raise forms.ValidationError(
                _(
                    "The cluster is not watched, so its nodes are unknown and none can be named: "
                    "leave nodes_to_remove out and NKS picks the nodes it removes."
                ),
                code="unwatched",
            )
        problems = []
        for item in value:
            if item in self.aliases:
                continue
            if item in self.refusals:
                problems.append(
                    gettext("%(node)s cannot be chosen: %(problem)s.")
                    % {"node": item, "problem": self.refusals[item]}
                )
            else:
                problems.append(
                    gettext("%(node)s is not a node of nodegroup %(nodegroup)s.")
                    % {"node": item, "nodegroup": self.nodegroup_name}
                )
        if problems:
            raise forms.ValidationError(problems, code="invalid_choice")


class HintedBoundField(BoundField):
    """A field whose hint the page writes beside it (``<auto_id>_hint``), not as help_text.

    Django ties help_text and errors to the control by ``aria-describedby``; the resize
    page's hints ("now 3; 1 to 10") are built in the template from the nodegroup, so the
    form names them too, and a screen reader reads hint, then error, on the field.
    """

    @property
    def aria_describedby(self) -> str | None:
        described = super().aria_describedby
        hinted: tuple[str, ...] = getattr(self.form, "hinted_fields", ())
        if described is None or not self.auto_id or self.name not in hinted:
            return described
        return " ".join(filter(None, [f"{self.auto_id}_hint", described]))


class ResizeForm(forms.Form):
    """A resize of one nodegroup, validated against what the dashboard knows of it.

    ``require_confirmation`` (the page, not the API) asks for the nodegroup's name typed out
    when scaling in. ``nodes_to_remove`` offers the nodegroup's Nodes (by their
    ``magnum.openstack.org/nodegroup`` label, from the watched cluster) whose instance UUID
    ``spec.providerID`` gives; they are pre-selected NotReady first, then those whose
    heartbeat Lease expired, then cordoned ones. Without a watched cluster no node can be
    named and NKS picks the nodes it removes.
    """

    bound_field_class = HintedBoundField
    # The page writes a hint with id "<auto_id>_hint" beside these fields.
    hinted_fields = ("node_count",)

    node_count = forms.IntegerField(
        label=_("Target node count"),
        min_value=1,
        error_messages={"required": _("Give the number of nodes the nodegroup should have.")},
    )
    nodes_to_remove = NodeChoiceField(
        label=_("Nodes to remove"),
        required=False,
        widget=NodeChoices,
        help_text=_(
            "When scaling in, choose exactly the nodes to remove; otherwise NKS picks random ones."
        ),
    )
    reason = forms.CharField(
        label=_("Reason"),
        max_length=1000,
        widget=forms.Textarea(attrs={"rows": 2}),
        error_messages={"required": _("Say why: the reason is kept in the audit.")},
    )
    confirm_name = forms.CharField(
        label=_("Type the nodegroup name to confirm removing nodes"),
        required=False,
        max_length=255,
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )

    def __init__(
        self,
        *args: Any,
        nodegroup: NksNodegroup,
        nodes: NodegroupNodes | NodegroupNodePage | None,
        require_confirmation: bool = True,
        target: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.nodegroup = nodegroup
        self.nodes = nodes
        self.require_confirmation = require_confirmation
        self.max_nodes = settings.NKS_MAX_NODES_PER_NODEGROUP
        if isinstance(nodes, NodegroupNodePage):
            # The page's unbound form: the first removable nodes, read as a page. A bound
            # form is validated against every member (NodegroupNodes), never against a page.
            assert not self.is_bound, "a resize is validated against every member"
            self.removable: list[NodeLine] = nodes.removal
            self.removable_total = nodes.removable_total
            unchoosable = nodes.unchoosable
        else:
            self.removable = nodes.removal_order() if nodes else []
            self.removable_total = len(self.removable)
            unchoosable = [
                node for node in (nodes.members if nodes else []) if not node.instance.ok
            ]
        # Members the form shows but cannot offer, with why (no parsable providerID).
        self.unchoosable: list[tuple[NodeLine, str]] = [
            (node, node.instance.problem) for node in unchoosable
        ]
        field = self.fields["nodes_to_remove"]
        assert isinstance(field, NodeChoiceField)
        field.nodegroup_name = nodegroup.name
        field.watched = nodes is not None
        for node in self.removable:
            assert node.instance.uuid is not None
            field.aliases[node.name] = field.aliases[node.instance.uuid] = node.instance.uuid
        for node, problem in self.unchoosable:
            field.refusals[node.name] = problem
        for node in nodes.unlabelled if nodes else []:
            field.refusals[node.name] = gettext(
                "it has no %(label)s label, so its nodegroup is unknown"
            ) % {"label": NODEGROUP_LABEL}
            if node.instance.uuid:
                field.refusals[node.instance.uuid] = field.refusals[node.name]
        count = self.fields["node_count"]
        count.max_value = self.max_nodes
        count.validators.append(MaxValueValidator(self.max_nodes))
        self.fields["node_count"].widget.attrs.update({"min": 1, "max": self.max_nodes})
        if not self.is_bound:
            current = nodegroup.node_count
            self.initial.setdefault("node_count", target or current)
            removing = current - target if target and current and target < current else None
            self.initial.setdefault("nodes_to_remove", self.suggested(removing))
        if not require_confirmation:
            del self.fields["confirm_name"]
        # Checkboxes for a bounded list: what `_offered` picks; the others are typed.
        self.offered = self._offered(field)
        field.choices = [(node.instance.uuid, node_label(node)) for node in self.offered]

    def _offered(self, field: NodeChoiceField) -> list[NodeLine]:
        """The removable nodes the page lists as checkboxes: the first NODES_OFFERED in
        removal order, every one pre-selected, and (bound) every removable one chosen."""
        if not self.is_bound:
            ticked = set(self.initial.get("nodes_to_remove") or [])
            return [
                node
                for index, node in enumerate(self.removable)
                if index < NODES_OFFERED or node.instance.uuid in ticked
            ]
        given = field.widget.value_from_datadict(
            self.data, self.files, self.add_prefix("nodes_to_remove")
        )
        chosen = {field.aliases.get(str(item)) for item in (given or [])}
        return [
            node
            for index, node in enumerate(self.removable)
            if index < NODES_OFFERED or node.instance.uuid in chosen
        ]

    @property
    def unlisted(self) -> int:
        """Removable nodes the checkboxes do not list (typed by name or UUID instead)."""
        return self.removable_total - len(self.offered)

    @property
    def typed_nodes(self) -> str:
        """What a bound form's text input shows again: the chosen items no checkbox shows
        ticked (a checkbox ticks its UUID only), so sending it again repeats no node."""
        if not self.is_bound:
            return ""
        field = self.fields["nodes_to_remove"]
        given = field.widget.value_from_datadict(
            self.data, self.files, self.add_prefix("nodes_to_remove")
        )
        offered = {node.instance.uuid for node in self.offered}
        return " ".join(str(item) for item in (given or []) if str(item) not in offered)

    def suggested(self, removing: int | None) -> list[str]:
        """The nodes to tick: NotReady, then silent heartbeats, then cordoned ones; as many as
        a scale-in by ``removing`` takes (while the target is not known, such nodes up to
        NODES_OFFERED: when a stale Node watch makes every Ready unknown, not all 500)."""
        troubled = [node.instance.uuid or "" for node in self.removable if node.removal_rank < 3]
        return troubled[:NODES_OFFERED] if removing is None else troubled[:removing]

    def refusal(self) -> str | None:
        """Why no resize can be asked for right now, whatever the numbers."""
        group = self.nodegroup
        cluster: NksCluster = group.cluster
        if group.gone_at is not None or cluster.gone_at is not None:
            return gettext("This nodegroup is gone from NKS.")
        if not group.is_worker:
            return gettext("Only worker nodegroups can be resized; %(nodegroup)s is %(role)s.") % {
                "nodegroup": group.name,
                "role": group.role or "?",
            }
        if group.in_progress:
            return gettext(
                "Nodegroup %(nodegroup)s is %(status)s: wait for that operation to finish."
            ) % {"nodegroup": group.name, "status": group.status}
        if cluster.in_progress:
            return gettext(
                "Cluster %(cluster)s is %(status)s: wait for that operation to finish."
            ) % {"cluster": cluster.name, "status": cluster.status}
        if group.autoscaler_enabled:
            return gettext(
                "The cluster autoscaler is enabled on %(nodegroup)s: it sets the node count. "
                "Turn it off in NKS to resize by hand."
            ) % {"nodegroup": group.name}
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
                gettext("%(nodegroup)s has a minimum of %(count)s nodes.")
                % {"nodegroup": group.name, "count": group.min_node_count},
            )
            return data
        if group.max_node_count is not None and target > group.max_node_count:
            self.add_error(
                "node_count",
                gettext("%(nodegroup)s has a maximum of %(count)s nodes.")
                % {"nodegroup": group.name, "count": group.max_node_count},
            )
            return data
        if current is None:
            raise forms.ValidationError(
                gettext("The nodegroup's current size is unknown; wait for a poll.")
            )
        if target == current:
            self.add_error(
                "node_count",
                gettext("%(nodegroup)s already has %(count)s nodes: no change.")
                % {"nodegroup": group.name, "count": current},
            )
            return data
        given: list[str] = data.get("nodes_to_remove") or []
        aliases = self.fields["nodes_to_remove"].aliases  # type: ignore[attr-defined]
        # Names and UUIDs both name a node; what is sent to NKS is always the UUID.
        chosen = [aliases.get(item, item) for item in given]
        data["nodes_to_remove"] = chosen
        # Checkboxes cannot repeat a node, but a crafted POST or an API body can: "a, a"
        # (or a node's name and its UUID) would pass "choose exactly 2" and name one node
        # for two removals.
        repeated = [node for node, times in Counter(chosen).items() if times > 1]
        if repeated:
            self.add_error(
                "nodes_to_remove",
                ngettext(
                    "%(nodes)s is chosen more than once: choose each node to remove once.",
                    "%(nodes)s are chosen more than once: choose each node to remove once.",
                    len(repeated),
                )
                % {"nodes": ", ".join(repeated)},
            )
            return data
        if target > current:
            if chosen:
                self.add_error(
                    "nodes_to_remove", gettext("Nodes can only be removed when scaling in.")
                )
            return data
        removing = current - target
        # Every removed node is chosen when enough can be; when fewer can (some have no
        # instance UUID), all that can be, and NKS picks the rest.
        needed = min(removing, len(self.removable))
        if self.removable and not needed <= len(chosen) <= removing:
            self.add_error(
                "nodes_to_remove",
                ngettext(
                    "Going from %(current)s to %(target)s removes %(removing)s node: "
                    "choose exactly %(needed)s (chosen: %(chosen)s).",
                    "Going from %(current)s to %(target)s removes %(removing)s nodes: "
                    "choose exactly %(needed)s (chosen: %(chosen)s).",
                    removing,
                )
                % {
                    "current": current,
                    "target": target,
                    "removing": removing,
                    "needed": needed,
                    "chosen": len(chosen),
                },
            )
        if self.require_confirmation and data.get("confirm_name", "").strip() != group.name:
            self.add_error(
                "confirm_name",
                gettext("Removing nodes needs confirmation: type %(nodegroup)s exactly.")
                % {"nodegroup": group.name},
            )
        return data

    def errors_json(self) -> dict[str, list[str]]:
        return {field: [str(error) for error in errors] for field, errors in self.errors.items()}


class ResizeTargetForm(forms.Form):
    """``?node_count=N`` on the nodegroup page: the scale-in whose nodes the form pre-selects."""

    node_count = forms.IntegerField(required=False, min_value=1, max_value=1000)

    def target(self) -> int | None:
        return self.cleaned_data.get("node_count") if self.is_valid() else None


def resized_cluster_choices() -> list[tuple[str, str]]:
    """Clusters that have resizes, by name. Called when the filter bar is drawn."""
    clusters = NksCluster.objects.filter(resizes__isnull=False)
    names = sorted(set(clusters.values_list("uuid", "name")), key=lambda row: natural_key(row[1]))
    return [("", gettext("any cluster")), *names]


def resizer_choices() -> list[tuple[str, str]]:
    """Everyone who asked for a resize. Called when the filter bar is drawn."""
    names = ResizeRequest.objects.order_by("username").values_list("username", flat=True)
    return [("", gettext("anyone")), *((name, name) for name in names.distinct())]


class ResizeFilterForm(forms.Form):
    """The audit page's filters: cluster (uuid), user (username) and outcome (state).

    Its selects render themselves (``{{ form.outcome }}``) with ids ``f-<field>``; cluster and
    user are text offered as selects, so one that has no resize matches none, without error.
    Their lengths are validators: ``max_length`` would also write ``maxlength=`` on a select.
    """

    cluster = forms.CharField(
        label=_("Cluster"),
        required=False,
        validators=[MaxLengthValidator(64)],
        widget=forms.Select(choices=CallableChoiceIterator(resized_cluster_choices)),
    )
    user = forms.CharField(
        label=_("User"),
        required=False,
        validators=[MaxLengthValidator(150)],
        widget=forms.Select(choices=CallableChoiceIterator(resizer_choices)),
    )
    outcome = forms.ChoiceField(
        label=_("Outcome"),
        required=False,
        choices=[("", _("any outcome")), ("in_flight", _("in flight"))],
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("auto_id", "f-%s")
        super().__init__(*args, **kwargs)
        self.fields["outcome"].choices = [
            ("", _("any outcome")),
            ("in_flight", _("in flight")),
            *ResizeState.choices,
        ]

    def filters(self) -> dict[str, str]:
        data = self.cleaned_data if hasattr(self, "cleaned_data") else {}
        return {key: (data.get(key) or "").strip() for key in ("cluster", "user", "outcome")}


class NksAccountForm(forms.ModelForm):
    """Admin's account form: the password and token are write-only, kept when left empty."""

    password = write_only_secret(
        _(
            "Set or replace the password; it is stored as a secret and never shown. "
            "Leave empty to keep the current one."
        ),
        autocomplete="new-password",
    )
    token = write_only_secret(
        _(
            "A fixed token instead of identity credentials; never shown again. Leave "
            "empty to keep the current one."
        ),
    )
    clear_token = forms.BooleanField(
        required=False,
        help_text=_("Remove the stored token (to switch to identity credentials)."),
    )
    api_url = ServiceURLFormField(
        label=_("API URL"),
        max_length=300,
        assume_scheme="https",
        help_text=_("The region's NKS API base URL."),
    )
    identity_url = ServiceURLFormField(
        label=_("Identity URL"),
        max_length=300,
        required=False,
        assume_scheme="https",
        help_text=_("Identity service base URL (tokens from POST {identity_url}/v2.0/tokens)."),
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
                    gettext(
                        "Give either a token or identity credentials, not both. To switch to "
                        "identity credentials, tick “clear token”; to switch to a token, "
                        "empty the identity fields."
                    )
                )
            password = ""
        elif not (all(identity) and password):
            raise forms.ValidationError(
                gettext(
                    "Give either a token, or all of identity URL, tenant ID, username and password."
                )
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
                    gettext(
                        "You changed %(fields)s: enter the token again, so the stored one is "
                        "never sent to a new address."
                    )
                    % {"fields": what},
                )
        elif stored.password and not data.get("password") and not data.get("token"):
            self.add_error(
                "password",
                gettext(
                    "You changed %(fields)s: enter the password again, so the stored one is "
                    "never sent to a new address."
                )
                % {"fields": what},
            )

    def save(self, commit: bool = True) -> NksAccount:
        account = super().save(commit=False)
        account.password = self.cleaned_data["password"]
        account.token = self.cleaned_data["token"]
        account.next_poll_at = None
        if commit:
            account.save()
        return account
