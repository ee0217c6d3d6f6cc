"""The key-value metadata of a GGUF model file (llama.cpp's format), read from its header alone.

A GGUF file starts with the magic `GGUF`, a version (2 or 3), its tensor and key-value counts, then each key-value:
a string key, a type, a value (little-endian; strings are a uint64 length and UTF-8 bytes; arrays an element type, a
uint64 count and the elements). The tensors come after and are never read. The `gguf` package's `GGUFReader` maps
every tensor and array of the file first: 7 s for a 45 MB file with a 151,936-token vocabulary, where this reads the
header it needs in a fraction of a second.
"""

from __future__ import annotations

import struct
from collections.abc import Collection
from pathlib import Path
from typing import Any, BinaryIO

MAGIC = b"GGUF"
VERSIONS = (2, 3)
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
"""GGUF value types with a fixed size, as struct formats (8 is a string, 9 an array)."""
_STRING, _ARRAY = 8, 9


class GGUFFormatError(ValueError):
    """The file is not a GGUF file, or its header is cut short."""


def read_gguf_metadata(path: str | Path, *, arrays: Collection[str] = ()) -> dict[str, Any]:
    """The file's key-values: numbers, booleans and strings, and the arrays named in `arrays` as lists (the others
    are skipped). `GGUFFormatError` when the file is not GGUF."""
    try:
        with open(path, "rb") as f:
            return _read(f, path, arrays)
    except struct.error as e:
        raise GGUFFormatError(f"{path}: the GGUF header ends early ({e})") from e


def _read(f: BinaryIO, path: str | Path, arrays: Collection[str]) -> dict[str, Any]:
    if f.read(4) != MAGIC:
        raise GGUFFormatError(f"{path} does not start with the GGUF magic")
    version, = _unpack(f, "<I")
    if version not in VERSIONS:
        raise GGUFFormatError(f"{path} is GGUF version {version}; versions {VERSIONS} are read")
    _tensors, count = _unpack(f, "<QQ")
    metadata: dict[str, Any] = {}
    for _ in range(count):
        key = _string(f)
        kind, = _unpack(f, "<I")
        if kind == _ARRAY:
            element, length = _unpack(f, "<IQ")
            value = _array(f, element, length, keep=key in arrays)
            if key in arrays:
                metadata[key] = value
        else:
            metadata[key] = _value(f, kind)
    return metadata


def _unpack(f: BinaryIO, fmt: str) -> tuple[Any, ...]:
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise GGUFFormatError(f"{getattr(f, 'name', 'the file')}: the GGUF header ends early")
    return struct.unpack(fmt, data)


def _string(f: BinaryIO) -> str:
    length, = _unpack(f, "<Q")
    data = f.read(length)
    if len(data) != length:
        raise GGUFFormatError(f"{getattr(f, 'name', 'the file')}: the GGUF header ends early")
    return data.decode("utf-8", errors="replace")


def _value(f: BinaryIO, kind: int) -> Any:
    if kind == _STRING:
        return _string(f)
    if kind in _SCALARS:
        return _unpack(f, _SCALARS[kind])[0]
    raise GGUFFormatError(f"{getattr(f, 'name', 'the file')}: unknown GGUF value type {kind}")


def _array(f: BinaryIO, element: int, length: int, *, keep: bool) -> list[Any] | None:
    if element in _SCALARS and not keep:
        f.seek(struct.calcsize(_SCALARS[element]) * length, 1)
        return None
    if element in _SCALARS:
        fmt = _SCALARS[element]
        return list(struct.unpack(f"<{length}{fmt[1]}", f.read(struct.calcsize(fmt) * length)))
    if element == _STRING and not keep:
        for _ in range(length):
            size, = _unpack(f, "<Q")
            f.seek(size, 1)
        return None
    values = [_value(f, element) if element != _ARRAY else _array(f, *_unpack(f, "<IQ"), keep=keep)
              for _ in range(length)]
    return values if keep else None
