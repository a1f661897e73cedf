"""A record declared once: a dataclass whose JSON (:meth:`Record.to_dict`), reading back
(:meth:`Record.from_dict`) and JSON Schema (:func:`json_schema`) pydantic derives from its
own fields.

* ``to_dict``: the fields in declaration order, values as they are (an ``int`` in a
  ``float`` field stays an ``int``), nested records as their own JSON.
* ``from_dict``: a stored body read back; a key an older body lacks takes the field's
  default, a key the record does not know is left out, nested records are built.
* Open JSON a record keeps as it came (facts, metadata, judgements) is marked :data:`Kept`:
  read back as stored, never converted or reordered.

A record subclasses :class:`Record`, parameterised with the type its JSON is read as (a
TypedDict, for readers that index the JSON; :data:`JsonObject` when none do), and is a
dataclass; that is all::

    @dataclass(slots=True)
    class Thing(Record[ThingBody]):
        name: str
        seen: Kept[dict[str, float]] = field(default_factory=dict)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Generic, Self, TypeAlias, TypeVar

from pydantic import SkipValidation, TypeAdapter

T = TypeVar("T")
B = TypeVar("B", bound=Mapping[str, object])

JsonObject: TypeAlias = dict[str, object]
"""A record's JSON as stored and sent; read it through its record's ``from_dict``."""

Number: TypeAlias = int | float
"""A JSON number as it was given: an ``int`` stays an ``int`` (a line number where a log has
no times, a deadline the rules give in whole seconds), a ``float`` a ``float``."""

Kept: TypeAlias = Annotated[T, SkipValidation]
"""Open JSON of a record, read back exactly as it was stored (no conversion: an ``int``
stays an ``int``, a TypedDict keeps its key order and keys it does not declare)."""

_ADAPTERS: dict[type, TypeAdapter[Any]] = {}


def adapter(cls: type[T]) -> TypeAdapter[T]:
    """The pydantic adapter of a record class (built once, on first use)."""
    found = _ADAPTERS.get(cls)
    if found is None:
        found = _ADAPTERS[cls] = TypeAdapter(cls)
    return found


def json_schema(cls: type) -> dict[str, object]:
    """The JSON Schema of a record's JSON."""
    schema: dict[str, object] = adapter(cls).json_schema(mode="serialization")
    return schema


class Record(Generic[B]):
    """Base of a dataclass declared once: its JSON (typed ``B``) and reading it back are
    generated."""

    __slots__ = ()

    def to_dict(self) -> B:
        """The record's JSON (fields in declaration order)."""
        body: B = adapter(type(self)).dump_python(self, warnings=False)
        return body

    @classmethod
    def from_dict(cls, data: B) -> Self:
        """The record of a stored body (a key an older body lacks takes its default; keys
        the record does not know are left out)."""
        record: Self = adapter(cls).validate_python(data)
        return record
