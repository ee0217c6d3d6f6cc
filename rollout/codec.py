"""One codec for the typed records whose JSON is their fields: `JsonRecord` gives a frozen dataclass `to_json` and
`from_json` from its fields' types, in place of methods written by hand for each.

`to_json` is the fields in declaration order (tuples as lists); `from_json` checks each value against its field's
type, coercing as JSON needs (an integral float to an int, an int to a float, a list to a tuple), ignores keys it
does not know and gives a missing field its default, so files written before a field existed still read; a missing
field without one, or a value of the wrong type, raises `pydantic.ValidationError` (a ValueError) naming the field.
A record whose file layout differs from its fields (a key left out when empty, a nested block renamed) keeps its own
methods. Both sides go through pydantic's `TypeAdapter` (pydantic comes with the `mcp` SDK), made once per class and
only when first used, so importing a record module does not import pydantic.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    from pydantic import TypeAdapter


@cache
def _adapter(cls: type) -> TypeAdapter[Any]:
    from pydantic import TypeAdapter

    return TypeAdapter(cls)


class JsonRecord:
    """Mixin for a frozen dataclass whose JSON object is its fields (see the module docstring)."""

    __slots__ = ()

    def to_json(self) -> dict[str, Any]:
        return _adapter(type(self)).dump_python(self, mode="json")

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        return _adapter(cls).validate_python(data)
