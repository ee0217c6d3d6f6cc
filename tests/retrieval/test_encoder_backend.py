"""Encoder backends: the ONNX exports against sentence-transformers, the export cache, and the choice of backend."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from rollout.errors import RetrievalError
from rollout.paths import PROJECT_ROOT, bundled_model_path
from rollout.records import Passage
from rollout.retrieval import Encoder, RetrievalParams, encoder_export, load_or_build_indexes
from rollout.retrieval.cache import dense_cache_params
from rollout.retrieval.encoder import load_encoder
from rollout.retrieval.encoder_export import ensure_exported
from rollout.retrieval.encoder_onnx import MODEL_FILE, PIPELINE_FILE, OnnxEncoder
from rollout.retrieval.params import ENCODER_BACKENDS, DenseParams

from tests.conftest import with_session_encoder

from .conftest import FACTS

ONNX_BACKENDS = ("onnx", "onnx-int8")
QUERIES = [
    "Where was Maurice Ravel born?",
    "deepest lake in the world",
    "VX-1234",
    "who introduced movable type to Europe",
    "",
    "   Spaces   AND Capitals   ",
]
TEXTS = QUERIES + [text for _, text in FACTS]


@pytest.fixture(scope="session")
def export_cache(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Path:
    """A cache folder holding both ONNX exports of the bundled model and nothing else, made once per session.

    The float32 export is the one the session's runs use (tests.conftest.cache_dir), copied; int8 is exported here.
    """
    cache = with_session_encoder(cache_dir, tmp_path_factory.mktemp("encoder-cache"))
    ensure_exported(bundled_model_path(), "onnx-int8", cache)
    return cache


@pytest.fixture(scope="module")
def torch_encoder() -> Encoder:
    """The bundled model on torch, the reference the ONNX backends are held to."""
    return Encoder()


@pytest.fixture(scope="session")
def onnx_encoders(export_cache: Path) -> dict[str, OnnxEncoder]:
    return {b: load_encoder(DenseParams(backend=b), cache_dir=export_cache) for b in ONNX_BACKENDS}


def test_every_backend_gives_unit_float32_rows_of_the_model_width(torch_encoder: Encoder, onnx_encoders):
    for backend in ENCODER_BACKENDS:
        enc = torch_encoder if backend == "torch" else onnx_encoders[backend]
        assert enc.backend == backend
        for vectors in (enc.encode_queries(QUERIES), enc.encode_passages(TEXTS)):
            assert vectors.dtype == np.float32 and vectors.flags.c_contiguous
            assert vectors.shape[1] == enc.dimension == 384
            np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
        assert enc.encode_queries([]).shape == (0, 384)


@pytest.mark.parametrize(("backend", "floor"), [("onnx", 0.9999), ("onnx-int8", 0.97)])
def test_onnx_vectors_point_where_torch_vectors_point(torch_encoder: Encoder, onnx_encoders, backend, floor):
    reference = torch_encoder.encode_passages(TEXTS)
    cosines = (reference * onnx_encoders[backend].encode_passages(TEXTS)).sum(axis=1)
    assert cosines.min() >= floor, dict(zip(TEXTS, cosines.round(5)))


def test_prefixes_are_applied_as_torch_applies_them(torch_encoder: Encoder, export_cache: Path):
    params = DenseParams(backend="onnx", query_prefix="query: ", passage_prefix="passage: ")
    onnx = load_encoder(params, cache_dir=export_cache)
    torch_prefixed = Encoder(query_prefix="query: ", passage_prefix="passage: ")
    cosines = (torch_prefixed.encode_queries(QUERIES) * onnx.encode_queries(QUERIES)).sum(axis=1)
    assert cosines.min() >= 0.9999
    # And the prefix does change the vectors, so the check above is not vacuous.
    assert (torch_encoder.encode_queries(QUERIES[:1]) * onnx.encode_queries(QUERIES[:1])).sum() < 0.999


def test_a_text_encodes_the_same_alone_or_in_a_batch(onnx_encoders):
    long_text = " ".join(text for _, text in FACTS)
    for backend, enc in onnx_encoders.items():
        alone = enc.encode_queries([QUERIES[0]])[0]
        batched = enc.encode_queries([long_text, QUERIES[0], "x"])[1]
        if backend == "onnx-int8":
            # Each text runs alone, so batch-mates cannot move its activation scales.
            np.testing.assert_array_equal(alone, batched)
        else:
            assert float(alone @ batched) >= 0.99999


def test_the_export_is_cached_and_a_second_load_does_not_export(export_cache: Path, caplog):
    before = sorted(p.name for p in export_cache.iterdir())
    exports = [n for n in before if not n.startswith(".")]  # beside them, the exports' lock files
    assert [n for n in exports if n.startswith("encoder-")] == exports and len(exports) == 2
    with caplog.at_level(logging.INFO, logger="rollout.retrieval.encoder_export"):
        folder = ensure_exported(bundled_model_path(), "onnx", export_cache)
    assert sorted(p.name for p in export_cache.iterdir()) == before
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("using exported onnx encoder") for m in messages), messages
    assert not any(m.startswith("exporting") for m in messages), messages
    assert (folder / PIPELINE_FILE).is_file()


def test_an_export_under_way_is_waited_for_not_made_twice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    exports: list[Path] = []

    def export(model_id: str, source: Path, backend: str, folder: Path) -> SimpleNamespace:
        exports.append(folder)
        if len(exports) == 1:
            # While this export runs, another process asks for the same one: it waits for this one to finish. (Were
            # it not to wait, it would find no export and make its own before this one ends.)
            second.start()
            second.join(timeout=1.0)
        (folder / PIPELINE_FILE).write_text("{}")
        (folder / MODEL_FILE).write_bytes(b"")
        return SimpleNamespace(dimension=384, min_cosine_vs_torch=1.0, export_seconds=0.0)

    monkeypatch.setattr(encoder_export, "_export", export)
    found: list[Path] = []
    second = threading.Thread(target=lambda: found.append(ensure_exported(bundled_model_path(), "onnx", tmp_path)))
    first = ensure_exported(bundled_model_path(), "onnx", tmp_path)
    second.join()
    assert len(exports) == 1 and found == [first] and (first / MODEL_FILE).is_file()


def test_an_unknown_backend_is_an_error_naming_the_choices(tmp_path: Path):
    with pytest.raises(RetrievalError, match=r"retriever\.dense\.backend='tensorrt'.*'torch', 'onnx', 'onnx-int8'"):
        load_encoder(DenseParams(backend="tensorrt"), cache_dir=tmp_path)  # type: ignore[arg-type]
    with pytest.raises(RetrievalError, match=r"'torch', 'onnx', 'onnx-int8'"):
        RetrievalParams.from_dict({"dense": {"backend": "openvino"}})
    assert list(tmp_path.iterdir()) == []


def test_a_pipeline_the_onnx_backend_does_not_reproduce_is_refused(torch_encoder: Encoder, tmp_path: Path):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense

    model = torch_encoder._model
    projected = SentenceTransformer(modules=[model[0], model[1], Dense(384, 64)], device="cpu")
    projected.save(str(tmp_path / "projected"))
    cache = tmp_path / "cache"
    with pytest.raises(RetrievalError, match=r"modules \['Transformer', 'Pooling', 'Dense'\].*backend=torch"):
        ensure_exported(str(tmp_path / "projected"), "onnx", cache)
    assert not any(p.name.startswith("encoder-") for p in cache.iterdir())


def test_the_backend_is_part_of_the_dense_index_cache_key(torch_encoder: Encoder, onnx_encoders):
    params = DenseParams()
    torch_key = dense_cache_params(params, torch_encoder)
    assert "encoder_backend" not in torch_key  # torch indexes keep the key they had before backends existed
    keys = {b: dense_cache_params(params, e) for b, e in onnx_encoders.items()}
    assert keys["onnx"]["encoder_backend"] == "onnx" and keys["onnx-int8"]["encoder_backend"] == "onnx-int8"
    assert len({str(sorted(k.items())) for k in (torch_key, *keys.values())}) == 3


GATEWAY_QUERY_PATH = """
import sys
from pathlib import Path
from rollout.records import Passage
from rollout.retrieval import RetrievalParams, load_or_build_indexes
facts = [Passage(id=f"fact-{{i}}", title=t, text=x) for i, (t, x) in enumerate({facts!r})]
params = RetrievalParams.from_dict({{"dense": {{"backend": "onnx"}}}})
dense = load_or_build_indexes(facts, Path({cache!r}), which=["dense"], params=params)["dense"]
hits = dense.search(["Where was Maurice Ravel born?"], 1)
print(facts[int(hits.indices[0, 0])].id)
print(sorted({{m.split(".")[0] for m in sys.modules}} & {{"torch", "sentence_transformers", "transformers"}}))
"""


def test_the_gateway_query_path_of_the_onnx_backend_does_not_import_torch(export_cache: Path, tmp_path: Path):
    # The gateway's path: load_or_build_indexes with the backend from the retriever config, then a search,
    # in a fresh interpreter (this one imported torch long ago). The export is cached; the index is built here.
    export = next(export_cache.glob("encoder-onnx-[0-9a-f]*"))
    (tmp_path / export.name).symlink_to(export, target_is_directory=True)
    code = GATEWAY_QUERY_PATH.format(facts=FACTS, cache=str(tmp_path))
    path = os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, cwd=PROJECT_ROOT,
                          env={**os.environ, "PYTHONPATH": path}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["fact-0", "[]"]


def test_an_onnx_index_is_cached_apart_from_the_torch_one(export_cache: Path, tmp_path: Path, torch_encoder: Encoder):
    facts = [Passage(id=f"fact-{i}", title=t, text=x) for i, (t, x) in enumerate(FACTS)]
    cache = tmp_path / "indexes"
    load_or_build_indexes(facts, cache, which=["dense"], encoder=torch_encoder)
    onnx = OnnxEncoder(next(export_cache.glob("encoder-onnx-[0-9a-f]*")))
    load_or_build_indexes(facts, cache, which=["dense"], encoder=onnx)
    assert len(list(cache.glob("dense-flat-*"))) == 2


def test_a_damaged_export_is_an_error_saying_how_to_rebuild_it(export_cache: Path, tmp_path: Path):
    export = next(export_cache.glob("encoder-onnx-[0-9a-f]*"))
    damaged = tmp_path / export.name
    damaged.mkdir()
    (damaged / PIPELINE_FILE).write_text((export / PIPELINE_FILE).read_text(encoding="utf-8"), encoding="utf-8")
    (damaged / "model.onnx").write_bytes((export / "model.onnx").read_bytes()[:1000])
    with pytest.raises(RetrievalError, match=r"delete that folder .* exported again"):  # no tokenizer.json
        OnnxEncoder(damaged)
    (damaged / "tokenizer.json").write_bytes((export / "tokenizer.json").read_bytes())
    with pytest.raises(RetrievalError, match=r"delete that folder .* exported again"):  # truncated graph
        OnnxEncoder(damaged)
    (damaged / PIPELINE_FILE).write_text("{not json", encoding="utf-8")
    with pytest.raises(RetrievalError, match=r"cannot read the exported encoder .* exported again"):
        OnnxEncoder(damaged)


def test_the_backend_is_part_of_the_run_identity_and_names_the_folder():
    from rollout.run.config import compose_run_config
    from rollout.run.identity import identity_settings

    default, torch = compose_run_config("mode=hybrid"), compose_run_config("mode=hybrid", "retriever.dense.backend=torch")
    old, new = identity_settings(default), identity_settings(torch)
    assert old["retriever.dense.backend"] == "onnx"
    assert [k for k in old.keys() | new.keys() if old.get(k) != new.get(k)] == ["retriever.dense.backend"]
    assert torch.output_dir == Path("results/demo/hybrid,retriever.dense.backend=torch")
