"""The dtype a sentence-transformers model computes in on a CPU: float32, whatever its checkpoint stores.

transformers 5 loads a model in its checkpoint's dtype, and Qwen3-Embedding's checkpoints are bfloat16: on a CPU
half-precision products are slow, and bfloat16 keeps 8 bits of mantissa. float32 holds every half-precision value
exactly, so widening keeps the checkpoint's weights, as transformers 4 loaded them. The torch encoder and the ONNX
export both widen (`rollout.retrieval.encoder`, `rollout.retrieval.encoder_export`).
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)


def float32_weights(model: Any) -> None:
    """Widen a torch model's float16 or bfloat16 parameters to float32, in place; a float32 model is left alone."""
    import torch

    if any(p.dtype in (torch.float16, torch.bfloat16) for p in model.parameters()):
        logger.debug("computing in float32 a model whose weights were loaded in half precision")
        model.float()
