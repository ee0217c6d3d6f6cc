"""The query side of BrowseComp-Plus' Qwen3-Embedding retrievers: instruction, last-token pooling, L2 norm.

Qwen3-Embedding's weights cannot be downloaded here, so the model is a Qwen3 of random weights (2 layers, 32 wide)
built by the test with transformers, with a word-level tokenizer that ends every text with `<|endoftext|>` and pads
on the left, as Qwen3-Embedding's tokenizer does. The reference is the computation written out by hand, each text
alone: the hidden state of its last token, divided by its norm.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rollout.errors import RetrievalError
from rollout.retrieval import RetrievalParams
from rollout.retrieval.cache import dense_cache_params
from rollout.retrieval.encoder import Encoder, load_encoder
from rollout.retrieval.params import DenseParams
from rollout.run.config import compose_run_config

BROWSECOMP_PLUS_INSTRUCTION = (
    "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:"
)
"""`--task-prefix` of BrowseComp-Plus' searcher/searchers/faiss_searcher.py, which it puts before the query as is."""
QUERIES = ["Who founded the city of Arvel ?", "Lake Baikal", "which composer wrote a ballet score in 1928 for a dancer"]
EOS = "<|endoftext|>"


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """`plain`: a Hugging Face Qwen3 model and tokenizer (no sentence-transformers config); `lasttoken`: the same
    weights laid out as Qwen3-Embedding's repository is (Transformer, Pooling lasttoken, Normalize); `bf16`: the
    weights stored in bfloat16, as Qwen3-Embedding's checkpoints are."""
    import torch
    from sentence_transformers import SentenceTransformer
    try:
        from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    except ImportError:  # sentence-transformers before 6
        from sentence_transformers.models import Normalize, Pooling, Transformer
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3Model

    root = tmp_path_factory.mktemp("qwen3-tiny")
    words = [w for text in (BROWSECOMP_PLUS_INSTRUCTION, *QUERIES)
             for w, _ in pre_tokenizers.Whitespace().pre_tokenize_str(text)]
    vocab = {EOS: 0, "[UNK]": 1} | {w: 0 for w in words}
    vocab = {w: i for i, w in enumerate(vocab)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(single=f"$A {EOS}", special_tokens=[(EOS, 0)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=EOS, pad_token=EOS, unk_token="[UNK]",
                                   padding_side="left")
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=512)
    plain, bf16 = root / "plain", root / "bf16"
    model = Qwen3Model(config)
    model.save_pretrained(plain)
    fast.save_pretrained(plain)
    model.to(torch.bfloat16).save_pretrained(bf16)
    fast.save_pretrained(bf16)
    lasttoken = root / "lasttoken"
    transformer = Transformer(str(plain))
    SentenceTransformer(modules=[transformer, Pooling(32, pooling_mode="lasttoken"), Normalize()]).save(str(lasttoken))
    return {"plain": plain, "lasttoken": lasttoken, "bf16": bf16}


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the ONNX exports of the module's models go: each model is exported once."""
    return tmp_path_factory.mktemp("qwen3-exports")


def by_hand(model_dir: Path, texts: list[str]) -> np.ndarray:
    """Each text alone through the model in float32: its last token's hidden state (the EOS the tokenizer appends),
    normalised."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir, dtype=torch.float32).eval()
    rows = []
    with torch.no_grad():
        for text in texts:
            ids = tokenizer(text, return_tensors="pt")
            assert ids["input_ids"][0, -1].item() == tokenizer.convert_tokens_to_ids(EOS)
            last = model(**ids).last_hidden_state[0, -1].numpy()
            rows.append(last / np.linalg.norm(last))
    return np.asarray(rows, dtype=np.float32)


def encoder(model_dir: Path, backend: str, cache: Path, pooling: str | None, prefix: str = BROWSECOMP_PLUS_INSTRUCTION):
    params = DenseParams(encoder=str(model_dir), backend=backend, pooling=pooling, query_prefix=prefix)
    return load_encoder(params, cache_dir=cache)


@pytest.mark.parametrize("backend", ["torch", "onnx"])
def test_last_token_pooling_after_the_instruction_is_the_hand_computation(qwen3, cache, backend):
    want = by_hand(qwen3["plain"], [BROWSECOMP_PLUS_INSTRUCTION + q for q in QUERIES])
    got = encoder(qwen3["plain"], backend, cache, "last").encode_queries(QUERIES)  # one batch: padded
    assert got.dtype == np.float32 and got.shape == (len(QUERIES), 32)
    np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("backend", ["torch", "onnx"])
def test_a_plain_model_without_the_setting_is_mean_pooled(qwen3, cache, backend):
    # sentence-transformers pools a Hugging Face model that is not a *ForCausalLM by its mean: the setting matters.
    want = by_hand(qwen3["plain"], [BROWSECOMP_PLUS_INSTRUCTION + q for q in QUERIES])
    got = encoder(qwen3["plain"], backend, cache, None).encode_queries(QUERIES)
    assert np.abs(got - want).max() > 0.1


@pytest.mark.parametrize("backend", ["torch", "onnx"])
def test_a_model_laid_out_as_qwen3_embedding_pools_its_last_token_without_the_setting(qwen3, cache, backend):
    want = by_hand(qwen3["plain"], [BROWSECOMP_PLUS_INSTRUCTION + q for q in QUERIES])
    got = encoder(qwen3["lasttoken"], backend, cache, None).encode_queries(QUERIES)
    np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("backend", ["torch", "onnx"])
def test_a_bfloat16_checkpoint_is_computed_in_float32(qwen3, cache, backend):
    # transformers 5 would compute in the checkpoint's bfloat16 (8 bits of mantissa), off by about 1e-2 here.
    want = by_hand(qwen3["bf16"], [BROWSECOMP_PLUS_INSTRUCTION + q for q in QUERIES])
    got = encoder(qwen3["bf16"], backend, cache, "last").encode_queries(QUERIES)
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_sentence_transformers_own_last_token_pooling_and_prompt_agree(qwen3, cache):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(qwen3["lasttoken"]), device="cpu", local_files_only=True)
    theirs = model.encode(QUERIES, prompt=BROWSECOMP_PLUS_INSTRUCTION, normalize_embeddings=True)
    ours = encoder(qwen3["plain"], "torch", cache, "last").encode_queries(QUERIES)
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


def test_the_qwen3_embedding_preset_is_browsecomp_plus_query_side():
    dense = compose_run_config("mode=dense", "retriever=qwen3_embedding").retriever.dense
    assert dense.query_prefix == BROWSECOMP_PLUS_INSTRUCTION
    assert (dense.pooling, dense.passage_prefix, dense.backend) == ("last", "", "torch")
    assert dense.encoder == "Qwen/Qwen3-Embedding-8B"


def test_an_unknown_pooling_names_the_choices(qwen3):
    with pytest.raises(RetrievalError, match=r"retriever\.dense\.pooling='eos' is not a pooling mode; choose one of "
                                             r"\['cls', 'last', 'max', 'mean'\]"):
        RetrievalParams.from_dict({"dense": {"pooling": "eos"}})
    with pytest.raises(RetrievalError, match="not a pooling mode"):
        Encoder(str(qwen3["plain"]), pooling="eos")


def test_the_pooling_is_in_a_built_index_cache_key_only_when_set(qwen3, cache):
    plain = encoder(qwen3["plain"], "torch", cache, None)
    assert "pooling" not in dense_cache_params(DenseParams(), plain)  # keys of indexes built before stay valid
    assert dense_cache_params(DenseParams(pooling="last"), plain)["pooling"] == "last"
