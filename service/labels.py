"""Label matchers, shared by receiver routes, silences, the store and the API (an incident's
labels: :func:`service.notify.routing.incident_labels`).

A matcher set is ``{field: [values]}``: every field must match (AND), any value of a field
(OR); values are exact or shell-style globs (``prod-*``). Fields: ``tier``, ``category``,
``stage``, ``severity``, ``status``, ``namespace``, ``pod``, ``node``, ``container``,
``stream``, ``incident`` (id), ``receiver`` (silences only) and ``label:<key>`` (Kubernetes
pod labels).
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any

FIELDS = frozenset(
    {
        "tier",
        "category",
        "stage",
        "severity",
        "status",
        "namespace",
        "pod",
        "node",
        "container",
        "stream",
        "incident",
        "receiver",
    }
)
LABEL = "label:"

GLOB_CHARS = frozenset("*?[")


def matches(labels: dict[str, str], matchers: dict[str, list[str]]) -> bool:
    for name, values in matchers.items():
        have = labels.get(name)
        if have is None or not any(v == have or fnmatchcase(have, v) for v in values):
            return False
    return True


def validate(matchers: Any) -> dict[str, list[str]]:
    """Normalise ``{field: value | [values]}``; ValueError names what is wrong."""
    if not isinstance(matchers, dict) or not matchers:
        raise ValueError("matchers must be a non-empty mapping of field to values")
    out: dict[str, list[str]] = {}
    for name, values in matchers.items():
        name = str(name)
        if name not in FIELDS and not (name.startswith(LABEL) and len(name) > len(LABEL)):
            raise ValueError(f"unknown matcher field {name!r}")
        if isinstance(values, str):
            values = [values]
        if not isinstance(values, list | tuple) or not values:
            raise ValueError(f"matcher {name!r} needs at least one value")
        out[name] = [str(v) for v in values]
    return out


def pins_one_namespace(matchers: dict[str, list[str]]) -> bool:
    """True when the matchers can only match inside one namespace: one exact
    ``namespace``, ``stream`` (``namespace/pod/container``) or ``incident`` value."""
    for key in ("namespace", "stream", "incident"):
        values = matchers.get(key) or []
        if len(values) == 1 and not GLOB_CHARS & set(values[0]):
            return True
    return False
