"""Text encoders for dense retrieval: a Protocol, the sentence-transformers (torch) encoder, and the backend choice.

`load_encoder` picks the implementation `retriever.dense.backend` names: `torch` (sentence-transformers),
or `onnx` / `onnx-int8` (an export of the same model run by onnxruntime, `rollout.retrieval.encoder_onnx`,
which never imports torch once the export is cached).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from rollout.errors import RetrievalError
from rollout.paths import bundled_model_path
from rollout.retrieval.model_dtype import float32_weights
from rollout.retrieval.model_files import resolve_model_dir
from rollout.retrieval.params import POOLING_MODES, DenseParams, check_encoder_backend, check_pooling

logger = logging.getLogger(__name__)


class TextEncoder(Protocol):
    """What a dense index needs from an encoder: unit-length float32 vectors of one width."""

    model_id: str
    """The model name or path used; part of cache keys."""
    backend: str
    """Which of `params.ENCODER_BACKENDS` computes the vectors; part of cache keys (backends differ slightly)."""
    dimension: int
    """Width of every vector."""
    passage_prefix: str
    """Text put before each passage; part of cache keys because it changes the stored vectors."""

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """float32 (len(texts), dimension), each row L2-normalised."""
        ...

    def encode_passages(self, texts: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        """float32 (len(texts), dimension), each row L2-normalised."""
        ...


def load_encoder(params: DenseParams, *, cache_dir: Path | None = None) -> TextEncoder:
    """The encoder `params` names (None = bundled model) on the backend `params.backend` names.

    The ONNX backends export the model into `cache_dir` (default: the index cache) on first use.
    """
    check_encoder_backend(params.backend)
    if params.backend == "torch":
        return Encoder.from_params(params)
    # Imported here: onnxruntime is needed only by these backends.
    from rollout.paths import default_cache_dir
    from rollout.retrieval.encoder_export import ensure_exported
    from rollout.retrieval.encoder_onnx import OnnxEncoder

    model_id = bundled_model_path() if params.encoder is None else str(params.encoder)
    folder = ensure_exported(model_id, params.backend, cache_dir or default_cache_dir())
    return OnnxEncoder(folder, query_prefix=params.query_prefix, passage_prefix=params.passage_prefix,
                       batch_size=params.batch_size,
                       pooling=None if params.pooling is None else POOLING_MODES[params.pooling])


class Encoder:
    """A sentence-transformers model loaded from local files only, with optional prefixes.

    Models such as e5 expect "query: " / "passage: " prefixes; all-MiniLM-L6-v2 expects none. `pooling` (one of
    `POOLING_MODES`) replaces the pooling the model's config names: a Hugging Face model without a
    sentence-transformers config is pooled by its mean, where Qwen3-Embedding needs its last token.
    """

    def __init__(
        self,
        model_name_or_path: str | None = None,
        *,
        query_prefix: str = "",
        passage_prefix: str = "",
        batch_size: int = 64,
        device: str = "cpu",
        pooling: str | None = None,
    ) -> None:
        if batch_size < 1:
            raise RetrievalError(f"batch_size must be at least 1, got {batch_size}")
        check_pooling(pooling)
        self.model_id = bundled_model_path() if model_name_or_path is None else str(model_name_or_path)
        resolve_model_dir(self.model_id)  # a model that is not here is refused before torch is loaded
        # Imported here because torch + transformers take seconds to import, and processes that
        # only talk to a gateway import this package without ever encoding anything.
        from sentence_transformers import SentenceTransformer

        self.backend = "torch"
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        self.batch_size = batch_size
        try:
            # local_files_only: nothing may be downloaded at run time on this machine.
            self._model = SentenceTransformer(self.model_id, device=device, local_files_only=True)
        except (OSError, ValueError) as e:
            raise RetrievalError(
                f"cannot load the sentence-transformers model {self.model_id!r} from local files ({e}); "
                "pass a local model directory, or download the model into the Hugging Face cache first, "
                "or leave the model unset to use the bundled all-MiniLM-L6-v2"
            ) from e
        if device == "cpu":
            float32_weights(self._model)
        if pooling is not None:
            _replace_pooling(self._model, POOLING_MODES[pooling], self.model_id)
        dimension = self._model.get_embedding_dimension()
        if dimension is None:
            raise RetrievalError(
                f"model {self.model_id!r} does not report an embedding width; use a sentence-embedding model"
            )
        self.dimension = int(dimension)
        logger.debug("loaded encoder %s (%d-d) on %s", self.model_id, self.dimension, device)

    @classmethod
    def from_params(cls, params: DenseParams, *, device: str = "cpu") -> Encoder:
        """The encoder `params` names (None = bundled model), with its prefixes and batch size."""
        return cls(
            params.encoder,
            query_prefix=params.query_prefix,
            passage_prefix=params.passage_prefix,
            batch_size=params.batch_size,
            device=device,
            pooling=params.pooling,
        )

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Encode queries with `query_prefix`; float32 (n, dimension), unit rows."""
        return self._encode(texts, self.query_prefix, show_progress=False)

    def encode_passages(self, texts: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        """Encode passages with `passage_prefix`; float32 (n, dimension), unit rows."""
        return self._encode(texts, self.passage_prefix, show_progress=show_progress)

    def _encode(self, texts: Sequence[str], prefix: str, *, show_progress: bool) -> np.ndarray:
        if isinstance(texts, str):
            raise RetrievalError("texts must be a sequence of strings; wrap a single text in a list")
        if len(texts) == 0:
            # sentence-transformers returns a shapeless float64 array for no input.
            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = self._model.encode(
            [prefix + t for t in texts],
            batch_size=self.batch_size,
            show_progress_bar=show_progress,
            convert_to_numpy=True,
            normalize_embeddings=True,
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)


def _replace_pooling(model: object, mode: str, model_id: str) -> None:
    """Swap the model's Pooling module for one pooling with sentence-transformers' `mode`, over the same width."""
    try:
        from sentence_transformers.sentence_transformer.modules import Pooling
    except ImportError:  # sentence-transformers before 6 keeps its modules here
        from sentence_transformers.models import Pooling

    for name, module in model._modules.items():  # type: ignore[attr-defined]
        if isinstance(module, Pooling):
            # The width is named embedding_dimension from sentence-transformers 6 on, word_embedding_dimension before.
            width = getattr(module, "embedding_dimension", None) or module.word_embedding_dimension
            model._modules[name] = Pooling(width, pooling_mode=mode)  # type: ignore[attr-defined]
            return
    raise RetrievalError(
        f"model {model_id!r} has no Pooling module to apply retriever.dense.pooling to; unset the setting"
    )
