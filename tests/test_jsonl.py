"""The tolerant jsonl reader under the ledger and trajectory readers: bad bytes cost one line."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from rollout.jsonl import read_jsonl


def test_a_byte_order_mark_is_dropped_silently(tmp_path: Path, caplog):
    path = tmp_path / "realtime_calls.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"tool_name": "a"}).encode() + b"\n")
    with caplog.at_level(logging.WARNING, logger="rollout.jsonl"):
        assert read_jsonl(path) == [{"tool_name": "a"}]
    assert not caplog.records


def test_a_line_that_is_not_utf8_is_skipped_with_its_file_and_line(tmp_path: Path, caplog):
    path = tmp_path / "realtime_calls.jsonl"
    path.write_bytes(json.dumps({"tool_name": "a"}).encode() + b"\n"
                     + b'{"tool_name": "\xff\xfe"}\n'
                     + json.dumps({"tool_name": "c"}).encode() + b"\n")
    with caplog.at_level(logging.WARNING, logger="rollout.jsonl"):
        rows = read_jsonl(path)
    assert rows == [{"tool_name": "a"}, {"tool_name": "c"}]
    assert f"{path}:2:" in caplog.text and "UTF-8" in caplog.text
