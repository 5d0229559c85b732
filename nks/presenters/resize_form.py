"""The resize form's error summary: every problem at the top of the form, each a link to its
field, so a keyboard or screen reader user lands on the list and jumps to what needs fixing."""

from __future__ import annotations

from dataclasses import dataclass

from nks.forms import ResizeForm

# The fieldset that groups the node checkboxes; the link target when it has no checkbox.
NODES_FIELDSET_ID = "nodes-to-remove"


@dataclass(frozen=True, slots=True)
class SummaryItem:
    text: str
    # "#<id>" of the control to fix; None for a problem of the whole form.
    href: str | None


def field_anchor(form: ResizeForm, name: str) -> str:
    """Where a link to field ``name`` lands: the control itself, so focus goes to it.

    The checkboxes have no single control: the first one, or their fieldset when none is
    offered (an unwatched cluster, a crafted POST naming nodes).
    """
    bound = form[name]
    if name == "nodes_to_remove":
        return f"#{bound.auto_id}_0" if form.removable else f"#{NODES_FIELDSET_ID}"
    return f"#{bound.auto_id}"


def nodes_described_by(form: ResizeForm) -> str:
    """The ids that describe the node checkboxes' fieldset (its aria-describedby): why no
    node can be chosen (not watched, none nameable) or the hint, then the field's errors."""
    bound = form["nodes_to_remove"]
    if form.nodes is None:
        why = "unwatched"
    elif form.removable:
        why = "helptext"
    else:
        why = "unnamed"
    ids = [f"{bound.auto_id}_{why}"]
    if bound.errors:
        ids.append(f"{bound.auto_id}_error")
    return " ".join(ids)


def error_summary(form: ResizeForm | None, *, conflict: bool = False) -> list[SummaryItem]:
    """The form's problems in page order: whole-form ones first, then field by field.

    With ``conflict`` the page writes the conflict itself (with a link to the request in
    flight), so its non-field message is not repeated here.
    """
    if form is None or not form.is_bound or form.is_valid():
        return []
    items = [] if conflict else [SummaryItem(str(e), None) for e in form.non_field_errors()]
    for name in form.fields:
        items.extend(SummaryItem(str(e), field_anchor(form, name)) for e in form[name].errors)
    return items
