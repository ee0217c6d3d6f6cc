"""The keys of an `llm.sampling` block: the ones the `openai` SDK takes by name, the servers' own ones rollout knows,
and the refusal of a misspelled one before anything runs.

Any key goes to the server (a key the SDK does not take goes into the request body as is, e.g. vLLM's `top_k`), so
a typo would be sent, ignored by the server, and the run would sample as before: `+llm.sampling.temprature=0.7`
ran at temperature 0. A key that is none of the known ones but looks like one of them is refused instead, naming
the key it looks like. Kept apart from `llm_client` so that a run checks its config without importing `openai`.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from rollout.errors import ConfigError

SDK_PARAMS = frozenset({
    "temperature", "top_p", "max_tokens", "max_completion_tokens", "seed", "stop", "presence_penalty",
    "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "reasoning_effort", "n", "user",
})
"""Sampling keys the SDK's chat-completions method takes by name; any other key goes into the request body as is."""
TEXT_SDK_PARAMS = SDK_PARAMS - {"max_completion_tokens", "top_logprobs", "reasoning_effort"}
"""The same for `/completions`, whose SDK method takes fewer."""
SERVER_PARAMS = frozenset({
    # vLLM and SGLang
    "top_k", "min_p", "repetition_penalty", "length_penalty", "min_tokens", "ignore_eos", "skip_special_tokens",
    "spaces_between_special_tokens", "add_special_tokens", "chat_template_kwargs", "include_stop_str_in_output",
    "stop_token_ids", "best_of", "use_beam_search", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
    "guided_decoding_backend", "structured_outputs", "response_format", "prompt_logprobs", "truncate_prompt_tokens",
    "return_tokens_as_token_ids", "allowed_token_ids", "bad_words", "no_stop_trim", "regex", "ebnf", "json_schema",
    "continue_final_message", "add_generation_prompt", "priority",
    # llama.cpp, Ollama and other local servers
    "typical_p", "repeat_penalty", "repeat_last_n", "mirostat", "mirostat_tau", "mirostat_eta", "tfs_z", "n_probs",
    "grammar", "cache_prompt", "dynatemp_range", "dynatemp_exponent", "xtc_probability", "xtc_threshold",
    "dry_multiplier", "dry_base", "dry_allowed_length", "dry_penalty_last_n", "top_a", "min_keep", "num_ctx",
    "num_predict",
})
"""Keys of OpenAI-compatible servers' own (vLLM, SGLang, llama.cpp, Ollama), sent in the request body."""
KNOWN = SDK_PARAMS | SERVER_PARAMS

_LOOKS_LIKE = 0.8
"""How alike (difflib's ratio) an unknown key and a known one must be for the unknown one to be a typo."""


def check_sampling_keys(sampling: Mapping[str, Any] | None, option: str = "llm.sampling") -> None:
    """A `ConfigError` naming the fix when a key of `sampling` (the block at `option`) is a misspelled known key."""
    for key in sampling or {}:
        name = str(key)
        if name in KNOWN:
            continue
        close = difflib.get_close_matches(name, KNOWN, n=1, cutoff=_LOOKS_LIKE)
        if close:
            raise ConfigError(
                f"{option}.{name} is not a sampling key, so no server would read it; did you mean "
                f"{option}.{close[0]}? Set that instead (the keys the SDK takes: {', '.join(sorted(SDK_PARAMS))}; "
                "a server's own, such as top_k or min_p, are sent as they are)")
