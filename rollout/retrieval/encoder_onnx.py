"""The query-time ONNX encoder: onnxruntime + the `tokenizers` fast tokenizer + pooling + normalisation.

It imports neither torch nor sentence-transformers (a gateway with this backend starts in a fraction of
the time). It reads a folder written by `rollout.retrieval.encoder_export` (the format is defined here: the files and
`ExportedPipeline`) and computes what
sentence-transformers computes for that model: tokenize (lower-cased where the model says so, truncated
to `max_seq_length`), run the transformer, pool over the real tokens, L2-normalise.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rollout.errors import RetrievalError

try:
    import onnxruntime as ort
    from tokenizers import Tokenizer
except ImportError as e:  # pragma: no cover - depends on the installation
    raise RetrievalError(
        f"retriever.dense.backend=onnx needs onnxruntime and tokenizers ({e}); pip install 'onnxruntime>=1.17' "
        "tokenizers, or set retriever.dense.backend=torch"
    ) from e

logger = logging.getLogger(__name__)

EXPORT_VERSION = 1
"""Bumped when the export procedure changes, so older exports are rebuilt rather than reused."""

MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
PIPELINE_FILE = "pipeline.json"

@dataclass(frozen=True, slots=True)
class ExportedPipeline:
    """What `pipeline.json` holds: everything the query-time encoder needs besides the graph and tokenizer."""

    model_id: str
    """The model name or path the export was made from."""
    backend: str
    """`onnx` or `onnx-int8`."""
    dimension: int
    """Width of the pooled vectors."""
    max_seq_length: int
    """Tokens kept per text (sentence-transformers' `max_seq_length`); longer texts are truncated."""
    lowercase: bool
    """sentence-transformers' `do_lower_case`: lower-case texts before tokenizing."""
    pooling: str
    """One of mean, cls, max, mean_sqrt_len_tokens, lasttoken."""
    pad_id: int
    """Token id that pads shorter texts in a batch (the tokenizer's `pad_token_id`)."""
    input_names: tuple[str, ...]
    """Graph inputs in order, as the tokenizer names them (input_ids, attention_mask, token_type_ids...)."""
    min_cosine_vs_torch: float
    """Smallest cosine between this graph's and sentence-transformers' vectors on the probe texts."""
    export_seconds: float
    export_version: int = EXPORT_VERSION

    @classmethod
    def read(cls, folder: Path) -> ExportedPipeline:
        raw = json.loads((folder / PIPELINE_FILE).read_text(encoding="utf-8"))
        raw["input_names"] = tuple(raw["input_names"])
        return cls(**raw)


_FEEDS = {"input_ids": "ids", "attention_mask": "attention_mask", "token_type_ids": "type_ids"}
"""Graph input name → the `tokenizers.Encoding` field that fills it."""


class OnnxEncoder:
    """A `TextEncoder` running an exported model in onnxruntime, loaded from the export cache.

    With int8 weights each text runs alone: dynamic quantization scales activations over the whole
    input tensor, so in a batch a text's vector would depend on the other texts and on padding, and
    `max_query_batch` (a speed-only setting) would change results.
    """

    def __init__(
        self,
        folder: Path,
        *,
        pipeline: ExportedPipeline | None = None,
        query_prefix: str = "",
        passage_prefix: str = "",
        batch_size: int = 64,
        pooling: str | None = None,
    ) -> None:
        """`pooling` (a sentence-transformers mode) replaces the exported model's own; it applies to the hidden
        states the graph returns, so the export stays the same."""
        if batch_size < 1:
            raise RetrievalError(f"batch_size must be at least 1, got {batch_size}")
        folder = Path(folder)
        try:
            self.pipeline = ExportedPipeline.read(folder) if pipeline is None else pipeline
        except (OSError, ValueError, TypeError, KeyError) as e:
            raise RetrievalError(
                f"cannot read the exported encoder at {folder} ({type(e).__name__}: {e}); delete that folder "
                "and the model is exported again on the next load"
            ) from e
        unknown = [n for n in self.pipeline.input_names if n not in _FEEDS]
        if unknown:
            raise RetrievalError(
                f"the exported model at {folder} takes inputs {unknown} that the ONNX backend does not fill "
                f"(it fills {sorted(_FEEDS)}); use retriever.dense.backend=torch for this model"
            )
        self.model_id = self.pipeline.model_id
        self.backend = self.pipeline.backend
        self.dimension = self.pipeline.dimension
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        self.batch_size = 1 if self.backend == "onnx-int8" else batch_size
        try:
            self._tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
            self._session = ort.InferenceSession(str(folder / MODEL_FILE), _session_options(),
                                                 providers=["CPUExecutionProvider"])
        # tokenizers and onnxruntime raise their own exception types for a missing, truncated or invalid file.
        except Exception as e:
            raise RetrievalError(
                f"cannot load the exported encoder at {folder} ({type(e).__name__}: {e}); delete that folder "
                "and the model is exported again on the next load"
            ) from e
        # Padding is done per batch below (after sorting by length), so the file's own padding is switched off.
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=self.pipeline.max_seq_length)
        self._pad_id = self.pipeline.pad_id
        self._pooling = self.pipeline.pooling if pooling is None else pooling
        logger.debug("loaded %s encoder %s (%d-d) from %s", self.backend, self.model_id, self.dimension, folder)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Encode queries with `query_prefix`; float32 (n, dimension), unit rows."""
        return self._encode(texts, self.query_prefix)

    def encode_passages(self, texts: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        """Encode passages with `passage_prefix`; float32 (n, dimension), unit rows."""
        return self._encode(texts, self.passage_prefix, show_progress=show_progress)

    def _encode(self, texts: Sequence[str], prefix: str, *, show_progress: bool = False) -> np.ndarray:
        if isinstance(texts, str):
            raise RetrievalError("texts must be a sequence of strings; wrap a single text in a list")
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        if len(texts) == 0:
            return out
        inputs = [prefix + t for t in texts]
        if self.pipeline.lowercase:
            inputs = [t.lower() for t in inputs]
        encodings = self._tokenizer.encode_batch(inputs)
        # Longest first and in length order, as sentence-transformers does: batches hold similar
        # lengths, so little compute goes to padding.
        order = np.argsort([-len(e.ids) for e in encodings], kind="stable")
        batches = range(0, len(order), self.batch_size)
        if show_progress:
            from tqdm import tqdm

            batches = tqdm(batches, desc="encoding", unit="batch")
        for start in batches:
            rows = order[start:start + self.batch_size]
            out[rows] = self._run([encodings[i] for i in rows])
        return out

    def _run(self, encodings: list) -> np.ndarray:
        width = max(len(e.ids) for e in encodings)
        arrays = {field: np.full((len(encodings), width), self._pad_id if field == "ids" else 0, dtype=np.int64)
                  for field in set(_FEEDS.values())}
        for row, encoding in enumerate(encodings):
            n = len(encoding.ids)
            for field, array in arrays.items():
                array[row, :n] = getattr(encoding, field)
        feeds = {name: arrays[_FEEDS[name]] for name in self.pipeline.input_names}
        (hidden,) = self._session.run(None, feeds)
        return _normalise(_pool(hidden, arrays["attention_mask"], self._pooling))


def _session_options() -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # Idle intra-op threads would otherwise spin for a while after each call, taking CPU from the
    # gateway's event loop and the rollout workers on the same few cores.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


def _pool(hidden: np.ndarray, mask: np.ndarray, mode: str) -> np.ndarray:
    """sentence-transformers' Pooling for one mode, over the tokens the attention mask keeps."""
    if mode == "cls":
        return hidden[:, 0]
    if mode == "lasttoken":
        # The last position the mask keeps, wherever the padding is (this encoder pads on the right; a causal model's
        # last real token never saw the padding after it).
        last = mask.shape[1] - 1 - np.argmax(mask[:, ::-1] > 0, axis=1)
        return hidden[np.arange(len(hidden)), last]
    weights = mask[:, :, None].astype(np.float32)
    if mode == "max":
        return np.where(weights > 0, hidden, np.float32(-1e9)).max(axis=1)
    summed = (hidden * weights).sum(axis=1)
    counts = np.clip(weights.sum(axis=1), 1e-9, None)
    if mode == "mean":
        return summed / counts
    if mode == "mean_sqrt_len_tokens":
        return summed / np.sqrt(counts)
    raise RetrievalError(f"pooling mode {mode!r} is not reproduced by the ONNX backend; use backend=torch")


def _normalise(vectors: np.ndarray) -> np.ndarray:
    # torch.nn.functional.normalize's eps, so an all-zero vector stays zero as it does there.
    norms = np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return np.ascontiguousarray(vectors / norms, dtype=np.float32)
