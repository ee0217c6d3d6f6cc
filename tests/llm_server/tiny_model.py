"""A llama-architecture GGUF with random weights and a real tokenizer: a model llama.cpp serves, made in seconds.

Its answers are noise; what it is for is the wire. A real server tokenizes the prompt with Qwen2's tokenizer,
renders chat messages with Qwen2.5's template, counts tokens, enforces its context window and stops at stop strings
and `max_tokens` as it would for a trained model. The tokenizer keys (`tokenizer.ggml.*`) are copied from the
vocab-only GGUF of llama-cpp-python's source distribution and the template is its Qwen2.5 one
(tests/llm_server/sources.py); the weights (2 layers, 64 wide) are drawn from a seeded normal, except that every
token's embedding holds 1 in its first dimension and the output layer is zero but for the `"` token (id 1), which
reads that dimension. So at temperature 0 the model writes `"` wherever it may and otherwise the lowest token id the
server allows: a tool call a grammar forces (llama-cpp-python's `tool_choice: "auto"`, which passes no `max_tokens`
on) closes each string at once and ends in about a second, `{"query":"","top_k":-0}`, where a purely random model
writes for minutes; free text is `"` repeated until `max_tokens`. The file is about 84 MB, nearly all of it the
151,936 x 64 embeddings and output layer.

From a checkout, `python -m tests.llm_server.tiny_model tiny.gguf` writes one (docs/agents.md, "Smoke-testing
with a real server").
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

from tests.demo_runs import locked
from tests.llm_server.sources import LlamaSources, llama_sources

LAYERS = 2
WIDTH = 64
HEADS = 4
FEED_FORWARD = 128
TRAINED_CONTEXT = 32768
"""The context length the file declares; the server's --n_ctx sets the window actually served."""
TOKENIZER_KEYS = "tokenizer.ggml."
QUOTE = 1
"""The id of `"` in Qwen2's byte-level vocabulary (after `!`, 0)."""


def build_tiny_model(out: Path, sources: LlamaSources, *, seed: int = 0) -> Path:
    """Write the model to `out` (written aside, then renamed into place) and return `out`."""
    import gguf

    vocab = gguf.GGUFReader(sources.vocab)
    n_vocab = len(vocab.fields[f"{TOKENIZER_KEYS}tokens"].data)
    aside = out.with_name(f".{out.name}.{os.getpid()}")
    writer = gguf.GGUFWriter(aside, arch="llama")
    writer.add_name("tiny-random-llama")
    writer.add_context_length(TRAINED_CONTEXT)
    writer.add_embedding_length(WIDTH)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FEED_FORWARD)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS)
    writer.add_rope_dimension_count(WIDTH // HEADS)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    for name, field in vocab.fields.items():
        if name.startswith(TOKENIZER_KEYS):
            array = field.types[0] == gguf.GGUFValueType.ARRAY
            writer.add_key_value(name, field.contents(), field.types[0], sub_type=field.types[-1] if array else None)
    writer.add_chat_template(sources.template.read_text(encoding="utf-8"))
    for name, tensor in _weights(n_vocab, seed).items():
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(aside, out)
    return out


def _weights(n_vocab: int, seed: int) -> dict[str, np.ndarray]:
    """The tensors, in numpy's row-major shapes (GGUF lists dimensions the other way round)."""
    rng = np.random.default_rng(seed)

    def normal(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)).astype(np.float32)

    ones = np.ones(WIDTH, dtype=np.float32)
    embeddings = normal(n_vocab, WIDTH)
    embeddings[:, 0] = 1.0  # the residual stream keeps a positive first dimension through the small random layers
    output = np.zeros((n_vocab, WIDTH), dtype=np.float32)
    output[QUOTE, 0] = 1.0  # so `"` is the one token with a positive logit (see the module docstring)
    weights = {"token_embd.weight": embeddings, "output_norm.weight": ones, "output.weight": output}
    for i in range(LAYERS):
        weights |= {
            f"blk.{i}.attn_norm.weight": ones,
            f"blk.{i}.attn_q.weight": normal(WIDTH, WIDTH),
            f"blk.{i}.attn_k.weight": normal(WIDTH, WIDTH),
            f"blk.{i}.attn_v.weight": normal(WIDTH, WIDTH),
            f"blk.{i}.attn_output.weight": normal(WIDTH, WIDTH),
            f"blk.{i}.ffn_norm.weight": ones,
            f"blk.{i}.ffn_gate.weight": normal(FEED_FORWARD, WIDTH),
            f"blk.{i}.ffn_up.weight": normal(FEED_FORWARD, WIDTH),
            f"blk.{i}.ffn_down.weight": normal(WIDTH, FEED_FORWARD),
        }
    return weights


def tiny_model(folder: Path, sources: LlamaSources | None = None) -> Path:
    """`folder`/tiny.gguf, built unless there; processes asking at once build it once (a lock on the folder)."""
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "tiny.gguf"
    with locked(folder / ".tiny.lock"):
        if not out.is_file():
            build_tiny_model(out, sources or llama_sources())
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.llm_server.tiny_model", description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="the .gguf file to write")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    args = parser.parse_args(argv)
    build_tiny_model(args.out, llama_sources(), seed=args.seed)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.0f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
