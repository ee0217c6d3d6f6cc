"""Where an encoder's files are: a local directory, or a snapshot already in the Hugging Face cache."""

from __future__ import annotations

from pathlib import Path

from rollout.errors import RetrievalError


def resolve_model_dir(model_id: str) -> Path:
    """A local directory for `model_id`: the path itself, or its snapshot in the Hugging Face cache (no download)."""
    path = Path(model_id).expanduser()
    if path.is_dir():
        return path.resolve()
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model_id, local_files_only=True))
    # Hub errors vary by version (missing repo, missing snapshot, offline); all mean "not available locally".
    except Exception as e:
        raise RetrievalError(
            f"cannot find the model {model_id!r} locally ({type(e).__name__}: {e}); pass a local model directory "
            "as retriever.dense.encoder, or download it into the Hugging Face cache first"
        ) from e
