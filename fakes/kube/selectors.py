"""Label and field selectors, as far as Lease clients use them.

Labels: `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`, comma-separated
(all must hold). Fields: `metadata.name` and `metadata.namespace` with `=`, `==`, `!=`, the
only field labels the apiserver supports for Leases. For Nodes the apiserver also supports
`spec.unschedulable`; this fake does not (a 400), as no client of the dashboard selects by it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from fakes.kube import errors

_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_EQUALITY = re.compile(rf"^\s*(?P<key>{_KEY})\s*(?P<op>==|=|!=)\s*(?P<value>{_VALUE})\s*$")
_SET = re.compile(rf"^\s*(?P<key>{_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)\s*$")
_EXISTS = re.compile(rf"^\s*(?P<bang>!?)\s*(?P<key>{_KEY})\s*$")

LabelTest = Callable[[Mapping[str, str]], bool]


def _split_terms(text: str) -> list[str]:
    """Split on commas that are not inside `in (...)` value lists."""
    terms: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(char)
    terms.append("".join(current))
    return terms


def _label_term(term: str) -> LabelTest:
    if match := _EQUALITY.match(term):
        key, value = match["key"], match["value"]
        if match["op"] == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if match := _SET.match(term):
        key = match["key"]
        values = frozenset(part.strip() for part in match["values"].split(","))
        if match["op"] == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if match := _EXISTS.match(term):
        key = match["key"]
        if match["bang"]:
            return lambda labels: key not in labels
        return lambda labels: key in labels
    raise errors.bad_request(f"unable to parse requirement: invalid label selector term {term!r}")


@dataclass(frozen=True, slots=True)
class LabelSelector:
    tests: tuple[LabelTest, ...]

    @classmethod
    def parse(cls, text: str) -> LabelSelector | None:
        """None for an empty selector, so callers can skip filtering entirely."""
        if not text.strip():
            return None
        return cls(tuple(_label_term(term) for term in _split_terms(text)))

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(test(labels) for test in self.tests)


@dataclass(frozen=True, slots=True)
class FieldSelector:
    name_equals: str | None = None
    name_not_equals: frozenset[str] = frozenset()
    namespace_equals: str | None = None
    namespace_not_equals: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, text: str) -> FieldSelector | None:
        if not text.strip():
            return None
        equals: dict[str, str] = {}
        not_equals: dict[str, set[str]] = {"metadata.name": set(), "metadata.namespace": set()}
        for term in text.split(","):
            for operator in ("!=", "==", "="):
                if operator in term:
                    field, _, value = term.partition(operator)
                    break
            else:
                raise errors.bad_request(f"invalid selector: '{text}'; can't understand '{term}'")
            field, value = field.strip(), value.strip()
            if field not in not_equals:
                raise errors.bad_request(f"field label not supported: {field}")
            if operator == "!=":
                not_equals[field].add(value)
            elif equals.setdefault(field, value) != value:
                # Two different required values: nothing can match; keep the first, it is moot.
                equals[field] = "\x00"
        return cls(
            name_equals=equals.get("metadata.name"),
            name_not_equals=frozenset(not_equals["metadata.name"]),
            namespace_equals=equals.get("metadata.namespace"),
            namespace_not_equals=frozenset(not_equals["metadata.namespace"]),
        )

    def matches(self, namespace: str, name: str) -> bool:
        if self.name_equals is not None and name != self.name_equals:
            return False
        if self.namespace_equals is not None and namespace != self.namespace_equals:
            return False
        return name not in self.name_not_equals and namespace not in self.namespace_not_equals


@dataclass(frozen=True, slots=True)
class ObjectFilter:
    """Which objects a list or watch request wants, beyond resource and URL namespace."""

    namespace: str | None = None
    labels: LabelSelector | None = None
    fields: FieldSelector | None = None

    @property
    def selects_everything(self) -> bool:
        return self.namespace is None and self.labels is None and self.fields is None

    @property
    def has_selectors(self) -> bool:
        return self.labels is not None or self.fields is not None

    def matches(self, namespace: str, name: str, labels: Mapping[str, str]) -> bool:
        if self.namespace is not None and namespace != self.namespace:
            return False
        if self.fields is not None and not self.fields.matches(namespace, name):
            return False
        return self.labels is None or self.labels.matches(labels)


def parse_filter(namespace: str | None, label_selector: str, field_selector: str) -> ObjectFilter:
    """Raises ApiError (400) for selectors the apiserver would reject."""
    return ObjectFilter(
        namespace=namespace,
        labels=LabelSelector.parse(label_selector),
        fields=FieldSelector.parse(field_selector),
    )
