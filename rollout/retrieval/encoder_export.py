"""Export a sentence-transformers model to ONNX once, offline, and cache it beside the indexes.

The export (torch → ONNX with `torch.onnx.export`, then optionally int8 dynamic quantization with
onnxruntime's `quantize_dynamic`) runs once per model, backend and model files, from local files only.
Later loads find the cached folder and never import torch or sentence-transformers: see
`rollout.retrieval.encoder_onnx`, which reproduces the rest of the pipeline (tokenizer, pooling,
normalisation) from the `pipeline.json` written here.

Only pipelines this package reproduces exactly are exported: a Transformer module, one Pooling mode
(mean, cls, max, mean_sqrt_len_tokens or lasttoken), optionally Normalize, and no default prompt. Anything else
is refused with the advice to use `retriever.dense.backend=torch`. Each export is checked against
sentence-transformers' own `encode` on probe texts before it is cached.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rollout.cache_folder import temp_prefix
from rollout.errors import RetrievalError
from rollout.retrieval.encoder_onnx import (
    EXPORT_VERSION,
    MODEL_FILE,
    PIPELINE_FILE,
    TOKENIZER_FILE,
    ExportedPipeline,
    OnnxEncoder,
)
from rollout.retrieval.model_files import resolve_model_dir

logger = logging.getLogger(__name__)

ONNX_BACKENDS: tuple[str, ...] = ("onnx", "onnx-int8")
"""Backends served by an exported ONNX graph; `onnx-int8` has int8 weights (dynamic quantization)."""

_POOLING_MODES = ("mean", "cls", "max", "mean_sqrt_len_tokens", "lasttoken")
_MIN_FP32_COSINE = 0.9999
"""The float32 graph computes what torch computes; anything further off is a broken export."""
_MIN_INT8_COSINE = 0.95
"""int8 weights move vectors a little (about 0.99 cosine here); below this the quantized graph is broken."""
_OPSET = 17


def ensure_exported(model_id: str, backend: str, cache_dir: Path) -> Path:
    """The folder holding `model_id` exported for `backend`, exporting it first if it is not cached.

    The folder is `<cache_dir>/encoder-<backend>-<16 hex>`, keyed by model id, backend, export version
    and the model files' names, sizes and modification times, so edited weights are exported again.
    """
    if backend not in ONNX_BACKENDS:
        raise RetrievalError(f"no ONNX export for backend {backend!r}; ONNX backends: {list(ONNX_BACKENDS)}")
    source = resolve_model_dir(model_id)
    cache_dir = Path(cache_dir)
    final = cache_dir / f"encoder-{backend}-{_export_key(model_id, backend, source)[:16]}"
    if _is_exported(final):
        logger.info("using exported %s encoder at %s", backend, final)
        return final
    cache_dir.mkdir(parents=True, exist_ok=True)
    with _one_exporter(final):
        if _is_exported(final):
            logger.info("using exported %s encoder at %s (another process exported it meanwhile)", backend, final)
            return final
        logger.info("exporting encoder %s to %s (once; later loads reuse it)", model_id, backend)
        # Built next to its final place, then renamed: a reader sees a complete export or none.
        tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(final.name), dir=cache_dir))
        try:
            pipeline = _export(model_id, source, backend, tmp)
            try:
                os.rename(tmp, final)
            except OSError:
                if not (final / PIPELINE_FILE).is_file():
                    raise
                logger.debug("%s appeared while exporting; keeping the existing copy", final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    logger.info("exported %s encoder (%d-d, min cosine vs torch %.5f) in %.1f s, cached at %s",
                backend, pipeline.dimension, pipeline.min_cosine_vs_torch, pipeline.export_seconds, final)
    return final


def _is_exported(folder: Path) -> bool:
    return (folder / PIPELINE_FILE).is_file() and (folder / MODEL_FILE).is_file()


@contextlib.contextmanager
def _one_exporter(final: Path) -> Iterator[None]:
    """Hold an exclusive lock on `.<final>.lock` beside the export: a process asking for an export another one is
    making (gateways of runs that share a cache, started at once) waits for it instead of spending the same seconds of
    CPU again. The kernel drops the lock if its holder dies; the file stays."""
    with (final.parent / f".{final.name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _export_key(model_id: str, backend: str, source: Path) -> str:
    files = sorted(p for p in source.rglob("*") if p.is_file() and not p.name.startswith("."))
    stats = [[str(p.relative_to(source)), p.stat().st_size, p.stat().st_mtime_ns] for p in files]
    payload = {"model_id": model_id, "backend": backend, "export_version": EXPORT_VERSION, "files": stats}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode("utf-8")).hexdigest()


def _export(model_id: str, source: Path, backend: str, out: Path) -> ExportedPipeline:
    # torch and sentence-transformers are imported here only: the export runs once, loads never need them.
    import torch
    from sentence_transformers import SentenceTransformer

    from rollout.retrieval.model_dtype import float32_weights

    started = time.perf_counter()
    try:
        model = SentenceTransformer(str(source), device="cpu", local_files_only=True)
    except (OSError, ValueError) as e:
        raise RetrievalError(f"cannot load {model_id!r} from {source} to export it ({e})") from e
    float32_weights(model)  # the graph is exported in float32, whatever the checkpoint's dtype
    transformer, pooling = _check_pipeline(model, model_id)
    tokenizer = getattr(transformer.tokenizer, "backend_tokenizer", None)
    if tokenizer is None:
        raise RetrievalError(f"{model_id!r} has no fast (Rust) tokenizer to export; use retriever.dense.backend=torch")
    input_names = tuple(transformer.tokenizer.model_input_names)
    auto_model = transformer.auto_model.eval()
    if hasattr(auto_model, "set_attn_implementation"):
        # The eager attention traces into plain ONNX ops; the SDPA kernel does not on every torch version.
        auto_model.set_attn_implementation("eager")
    graph = _last_hidden_state(auto_model, input_names)
    probes = _probe_texts()
    sample = transformer.tokenizer(probes[:2], padding=True, truncation=True, return_tensors="pt")
    axes = {name: {0: "batch", 1: "tokens"} for name in (*input_names, "last_hidden_state")}
    fp32_path = out / MODEL_FILE
    with warnings.catch_warnings(), torch.no_grad():
        # The tracer warns about Python branches on shapes; the probe check below is what proves the graph.
        warnings.simplefilter("ignore")
        torch.onnx.export(graph, tuple(sample[n] for n in input_names), str(fp32_path), input_names=list(input_names),
                          output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=_OPSET, dynamo=False)
    tokenizer.save(str(out / TOKENIZER_FILE))
    pipeline = ExportedPipeline(
        model_id=model_id, backend=backend, dimension=int(model.get_embedding_dimension()),
        max_seq_length=int(transformer.max_seq_length), lowercase=bool(getattr(transformer, "do_lower_case", False)),
        pooling=pooling, pad_id=int(transformer.tokenizer.pad_token_id or 0), input_names=input_names,
        min_cosine_vs_torch=0.0, export_seconds=0.0,
    )
    if backend == "onnx-int8":
        _quantize(fp32_path)
    cosine = _check_against_torch(model, out, pipeline, probes)
    floor = _MIN_INT8_COSINE if backend == "onnx-int8" else _MIN_FP32_COSINE
    if cosine < floor:
        raise RetrievalError(
            f"the {backend} export of {model_id!r} gives vectors only {cosine:.4f} cosine-similar to sentence-"
            f"transformers' (need {floor}); this model's pipeline is not reproduced, use retriever.dense.backend=torch"
        )
    info = {**asdict(pipeline), "min_cosine_vs_torch": round(cosine, 6),
            "export_seconds": round(time.perf_counter() - started, 2)}
    (out / PIPELINE_FILE).write_text(json.dumps(info, indent=2), encoding="utf-8")
    return ExportedPipeline.read(out)


def _check_pipeline(model: Any, model_id: str) -> tuple[Any, str]:
    """The Transformer module and pooling mode, or an error naming what this backend does not reproduce."""
    kinds = [type(m).__name__ for m in model]
    advice = "use retriever.dense.backend=torch for this model"
    if kinds[:2] != ["Transformer", "Pooling"] or any(k != "Normalize" for k in kinds[2:]):
        raise RetrievalError(
            f"model {model_id!r} has modules {kinds}; the ONNX backends reproduce Transformer + Pooling "
            f"(+ Normalize) only; {advice}"
        )
    if getattr(model, "default_prompt_name", None):
        raise RetrievalError(f"model {model_id!r} applies a default prompt, which the ONNX backends do not; {advice}")
    pooling = model[1]
    mode = getattr(pooling, "pooling_mode", None) or pooling.get_pooling_mode_str()
    if not isinstance(mode, str) or mode not in _POOLING_MODES:
        raise RetrievalError(
            f"model {model_id!r} pools with {mode!r}; the ONNX backends reproduce one of {list(_POOLING_MODES)}; "
            f"{advice}"
        )
    return model[0], mode


def _last_hidden_state(model: Any, input_names: tuple[str, ...]) -> Any:
    """The Hugging Face model as a module taking positional tensors in the tokenizer's input order."""
    import torch

    class LastHiddenState(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
            return self.model(**dict(zip(input_names, tensors))).last_hidden_state

    return LastHiddenState().eval()


def _quantize(fp32_path: Path) -> None:
    """Replace the float32 graph by one with int8 weights (dynamic quantization: activations scaled per call)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    int8_path = fp32_path.with_name("model.int8.onnx")
    # onnxruntime's quantizer logs each tensor it skips on the root logger; those lines say nothing to a user.
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.WARNING))
    # uint8 weights per output channel, as sentence-transformers' "avx2" preset quantizes them for CPUs
    # without VNNI; per-channel scales keep vectors closer to the float ones than one scale per tensor.
    try:
        quantize_dynamic(str(fp32_path), str(int8_path), weight_type=QuantType.QUInt8, per_channel=True)
    finally:
        root.setLevel(level)
    os.replace(int8_path, fp32_path)


def _check_against_torch(model: Any, folder: Path, pipeline: ExportedPipeline, probes: list[str]) -> float:
    """Smallest cosine between sentence-transformers' vectors and the exported graph's, alone and batched."""
    reference = model.encode(probes, batch_size=8, convert_to_numpy=True, normalize_embeddings=True,
                             show_progress_bar=False)
    exported = OnnxEncoder(folder, pipeline=pipeline)
    batched = exported.encode_passages(probes)
    alone = [exported.encode_queries([p])[0] for p in probes]
    return float(min((reference * batched).sum(axis=1).min(), (reference * alone).sum(axis=1).min()))


def _probe_texts() -> list[str]:
    """Short, long (past truncation), cased, padded-in-a-batch and empty texts: the cases an export can get wrong."""
    long_text = " ".join(f"Passage sentence {i} names the river Arvel and the city of Ostrava." for i in range(80))
    return [
        "Who founded the city of Arvel?",
        "The VX-1234 is a handheld spectrometer sold to field geologists.",
        "  UPPER CASE and lower case,   with odd   spacing  ",
        long_text,
        "",
        "Lake Baikal in Siberia is the deepest freshwater lake on Earth.",
        "ORG-5521",
        "Ravel composed Bolero in 1928 as a ballet score for the dancer Ida Rubinstein. " * 3,
    ]
