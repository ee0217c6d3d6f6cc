"""rollout.codec: a record whose JSON is its fields reads back what it wrote, takes defaults for fields an older file
lacks, and names the field that is wrong."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from pydantic import ValidationError

from rollout.benchmark_scores import Calibration, CalibrationBin
from rollout.summary import EndpointLoad


def test_a_record_reads_back_what_it_wrote_in_field_order():
    calibration = Calibration(n=3, error=0.25, correct_by="exact_match", confidence=0.5, accuracy=0.75,
                              bins=[CalibrationBin(0.0, 0.1, 3, 0.05, 1.0)])
    data = json.loads(json.dumps(calibration.to_json()))
    assert list(data) == ["n", "error", "correct_by", "confidence", "accuracy", "bins", "browsecomp_plus_error"]
    assert data["bins"] == [{"low": 0.0, "high": 0.1, "n": 3, "confidence": 0.05, "accuracy": 1.0}]
    assert Calibration.from_json(data) == calibration


def test_an_older_file_takes_the_defaults_and_a_wrong_value_names_its_field():
    older = EndpointLoad.from_json({"requests": 4, "sent_at_once": 2.0, "served_at_once": 1, "unknown": True})
    assert older == EndpointLoad(4, 2, 1.0, timed_by_server=False, completion_tokens_per_s=None, queued_share=None)
    with pytest.raises(ValidationError, match="sent_at_once"):
        EndpointLoad.from_json({"requests": 4, "sent_at_once": "many", "served_at_once": None})


def test_importing_a_record_module_does_not_import_pydantic():
    code = "import sys, rollout.summary, rollout.accounting; print('pydantic' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
