"""IVF layout of the dense index: how many lists, which vectors train them, and the PQ code size.

An IVF index clusters the passage vectors into `nlist` lists (k-means on unit vectors, by inner
product) and a query scans only the `nprobe` lists whose centroids score highest. With PQ each
vector is stored as `m` one-byte codes instead of `4 x dimension` bytes.

The rules, all decided from the corpus size so that the same config works on the 2,000-passage demo
and on a Wikipedia-size corpus:

- nlist: `ivf_nlist`, or about 4 x sqrt(passages) when unset; then at most passages // 39, because
  faiss' k-means wants at least 39 training points per centroid (it warns below that), and at least 1.
- training sample: min(passages, max(64 x nlist, 16,384)) vectors drawn without replacement with a
  fixed seed; k-means would subsample to 256 per centroid anyway, and 64 per list keeps training on
  millions of passages to minutes on a few cores. The 16,384 floor gives PQ's 256 code words per
  sub-quantizer 64 points each.
- PQ bits: 8 per code; fewer (down to 1) only when the training sample holds under 39 points per code
  word, so a small corpus still trains cleanly. Fewer than 78 passages cannot train a PQ at all.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import faiss
import numpy as np

from rollout.errors import RetrievalError
from rollout.retrieval.params import DenseParams

logger = logging.getLogger(__name__)

MIN_POINTS_PER_CENTROID = 39
"""faiss' k-means warns when it gets fewer training points than this per centroid."""
TRAIN_POINTS_PER_LIST = 64
"""Training vectors per inverted list (faiss advises 39 to 256)."""
MIN_TRAIN_POINTS = 16_384
"""Training sample floor (when the corpus has that many), for the PQ code books."""
PQ_MAX_BITS = 8
TRAIN_SEED = 0
"""Seed of the training sample; faiss' own k-means seed is fixed too, so a build is repeatable."""


@dataclass(frozen=True, slots=True)
class IvfLayout:
    """The shape of one IVF index, decided from the corpus size and the settings."""

    nlist: int
    """Inverted lists (k-means centroids)."""
    train_size: int
    """Vectors the quantizers are trained on."""
    pq_m: int
    """PQ sub-quantizers (codes per vector); 0 = IVFFlat."""
    pq_nbits: int
    """Bits per PQ code; 0 without PQ."""

    @property
    def bytes_per_vector(self) -> float | None:
        """Stored code bytes per vector (ids excluded); None for IVFFlat, whose codes are the vectors."""
        return None if self.pq_m == 0 else self.pq_m * self.pq_nbits / 8


def default_nlist(num_vectors: int) -> int:
    """About 4 x sqrt(n) lists, before the clamp to the corpus size."""
    return max(1, round(4 * math.sqrt(num_vectors)))


def check_ivf_params(params: DenseParams) -> None:
    """Settings that are wrong whatever the corpus: nlist < 1, nprobe < 1, pq_m < 0."""
    for field, low in (("ivf_nlist", 1), ("ivf_nprobe", 1), ("ivf_pq_m", 0)):
        value = getattr(params, field)
        if field == "ivf_nlist" and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            hint = "null (about 4 x sqrt(passages)) or a positive integer" if field == "ivf_nlist" else (
                "a positive integer" if low == 1 else "0 (IVFFlat) or a positive integer"
            )
            raise RetrievalError(f"retriever.dense.{field}={value!r}: use {hint}")


def plan_ivf(num_vectors: int, dimension: int, params: DenseParams) -> IvfLayout:
    """The layout `build_ivf` makes for this many vectors of this width (see the module docstring)."""
    check_ivf_params(params)
    pq_m = params.ivf_pq_m
    if pq_m > 0 and dimension % pq_m != 0:
        divisors = [m for m in range(1, dimension + 1) if dimension % m == 0 and m <= 96]
        raise RetrievalError(
            f"retriever.dense.ivf_pq_m={pq_m} does not divide the vector width {dimension}; use one of "
            f"{divisors} (each sub-quantizer codes dimension / m components), or 0 for IVFFlat"
        )
    wanted = default_nlist(num_vectors) if params.ivf_nlist is None else params.ivf_nlist
    nlist = max(1, min(wanted, num_vectors // MIN_POINTS_PER_CENTROID))
    if params.ivf_nlist is not None and nlist != wanted:
        logger.warning(
            "retriever.dense.ivf_nlist=%d is more than %d passages can train (%d per list); using %d lists",
            wanted, num_vectors, MIN_POINTS_PER_CENTROID, nlist,
        )
    train_size = min(num_vectors, max(TRAIN_POINTS_PER_LIST * nlist, MIN_TRAIN_POINTS))
    pq_nbits = 0
    if pq_m > 0:
        pq_nbits = min(PQ_MAX_BITS, int(math.log2(train_size / MIN_POINTS_PER_CENTROID)) if train_size else 0)
        if pq_nbits < 1:
            raise RetrievalError(
                f"a PQ index needs at least {2 * MIN_POINTS_PER_CENTROID} passages to train its code books; "
                f"this corpus has {num_vectors}: set retriever.dense.ivf_pq_m=0 (IVFFlat) or index=flat"
            )
    return IvfLayout(nlist=nlist, train_size=train_size, pq_m=pq_m, pq_nbits=pq_nbits)


def build_ivf(vectors: np.ndarray, params: DenseParams) -> faiss.IndexIVF:
    """Train an inner-product IVF (IVFFlat, or IVFPQ with `ivf_pq_m`) on a sample of `vectors`, then add all."""
    n, dimension = vectors.shape
    index, layout = new_ivf(n, dimension, params)
    train_ivf(index, layout, vectors[sample_rows(n, layout)] if layout.train_size < n else vectors)
    index.add(vectors)
    return index


def new_ivf(n: int, dimension: int, params: DenseParams) -> tuple[faiss.IndexIVF, IvfLayout]:
    """An untrained inner-product IVF for `n` vectors, laid out by `plan_ivf`, searching `ivf_nprobe` lists."""
    layout = plan_ivf(n, dimension, params)
    codes = f"PQ{layout.pq_m}x{layout.pq_nbits}" if layout.pq_m > 0 else "Flat"
    index = faiss.index_factory(dimension, f"IVF{layout.nlist},{codes}", faiss.METRIC_INNER_PRODUCT)
    index.cp.spherical = True  # centroids of unit vectors ranked by inner product: keep them unit length
    if layout.pq_m > 0:
        # index_factory turns on polysemous training, an annealing pass that served only Hamming
        # pre-filtering (unused here) and took 98% of the build: 223 s of 228 on 20,000 vectors.
        index.do_polysemous_training = False
    index.nprobe = params.ivf_nprobe
    logger.debug("IVF index: %d lists, trained on %d of %d vectors, PQ m=%d x %d bits",
                 layout.nlist, layout.train_size, n, layout.pq_m, layout.pq_nbits)
    return index, layout


def sample_rows(n: int, layout: IvfLayout) -> np.ndarray:
    """The rows (ascending) the quantizers train on: `layout.train_size` of `n`, drawn with a fixed seed."""
    return np.sort(np.random.default_rng(TRAIN_SEED).choice(n, size=layout.train_size, replace=False))


def train_ivf(index: faiss.IndexIVF, layout: IvfLayout, sample: np.ndarray) -> None:
    """Train `index` on the sample vectors (the rows `sample_rows` names, or every vector when it names all)."""
    if layout.nlist == 1:
        # One list holds everything; k-means with one centroid is the mean, and faiss would warn
        # about fewer than 39 points on a tiny corpus, so the centroid is set here instead.
        centroid = sample.mean(axis=0, keepdims=True, dtype=np.float64).astype(np.float32)
        index.quantizer.add(centroid)
    index.train(sample)


def find_ivf(index: faiss.Index) -> faiss.IndexIVF | None:
    """The IVF index inside `index` (itself, or wrapped in an id map or transform), if any."""
    try:
        return faiss.extract_index_ivf(index)
    except RuntimeError:
        return None


def describe_ivf(ivf: faiss.IndexIVF) -> dict[str, int]:
    """What `DenseRetriever.save` records of an IVF index."""
    ivf = faiss.downcast_index(ivf)
    pq = getattr(ivf, "pq", None)
    return {
        "ivf_nlist": int(ivf.nlist),
        "ivf_pq_m": 0 if pq is None else int(pq.M),
        "ivf_pq_nbits": 0 if pq is None else int(pq.nbits),
    }
