"""The GGUF header reader agrees with the `gguf` package's reader on every value type, skips the arrays it is not
asked for, and refuses what is not GGUF."""

from __future__ import annotations

import pytest

from rollout.llm.gguf_header import GGUFFormatError, read_gguf_metadata

gguf = pytest.importorskip("gguf")


def write_gguf(path, with_tensor: bool = True):
    writer = gguf.GGUFWriter(path, arch="llama")
    writer.add_uint8("t.u8", 200)
    writer.add_int8("t.i8", -5)
    writer.add_uint16("t.u16", 60000)
    writer.add_int16("t.i16", -3000)
    writer.add_uint32("t.u32", 4_000_000_000)
    writer.add_int32("t.i32", -7)
    writer.add_float32("t.f32", 0.5)
    writer.add_uint64("t.u64", 2**40)
    writer.add_int64("t.i64", -(2**40))
    writer.add_float64("t.f64", 0.25)
    writer.add_bool("t.bool", True)
    writer.add_string("t.string", "héllo")
    writer.add_array("t.ints", [1, 2, 3])
    writer.add_array("t.strings", ["a", "bé", ""])
    writer.add_array("t.nested", [[1, 2], [3]])
    writer.add_chat_template("{{ messages }}")
    if with_tensor:
        import numpy as np

        writer.add_tensor("w", np.arange(6, dtype=np.float32).reshape(2, 3))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_every_value_type_reads_as_the_gguf_package_reads_it(tmp_path):
    path = write_gguf(tmp_path / "m.gguf")
    arrays = {"t.ints", "t.strings", "t.nested"}
    ours = read_gguf_metadata(path, arrays=arrays)
    theirs = {name: field.contents() for name, field in gguf.GGUFReader(path).fields.items()
              if not name.startswith("GGUF.")}
    # 0.5 and 0.25 are exact in float32; the gguf package flattens an array of arrays ([1, 2, 3]).
    assert ours.pop("t.nested") == [[1, 2], [3]] and theirs.pop("t.nested") == [1, 2, 3]
    assert ours == theirs and ours["t.strings"] == ["a", "bé", ""]


def test_arrays_not_asked_for_are_skipped(tmp_path):
    ours = read_gguf_metadata(write_gguf(tmp_path / "m.gguf"))
    assert not {"t.ints", "t.strings", "t.nested"} & set(ours)
    assert ours["tokenizer.chat_template"] == "{{ messages }}" and ours["t.f64"] == 0.25


def test_a_file_that_is_not_gguf_or_is_cut_short_is_refused(tmp_path):
    (tmp_path / "x.gguf").write_bytes(b"PK\x03\x04 not a model")
    with pytest.raises(GGUFFormatError, match="does not start with the GGUF magic"):
        read_gguf_metadata(tmp_path / "x.gguf")
    whole = write_gguf(tmp_path / "m.gguf", with_tensor=False).read_bytes()
    (tmp_path / "cut.gguf").write_bytes(whole[:60])
    with pytest.raises(GGUFFormatError, match="ends early"):
        read_gguf_metadata(tmp_path / "cut.gguf")
