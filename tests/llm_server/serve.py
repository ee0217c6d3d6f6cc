"""`python -m tests.llm_server.serve ARGS`: llama-cpp-python's server (`python -m llama_cpp.server ARGS`, the same
arguments) with llama.cpp's extra weight buffer types turned off.

Those are the CPU backend's repacked and AMX layouts of quantized weights. On CPUs with AMX (recent Xeons) under a
virtual machine, llama-cpp-python 0.3.36 built for the machine dies with a general protection fault in
`libggml-cpu.so` on the first prompt of more than one token of a Q4_1 model (SmolLM2's GGUF); a one-token prompt, or
a float model such as the tiny one, runs. The server has no option for it (llama.cpp's own `llama-server` has
`--no-repack`), so the model's default load parameters are changed before the server loads it. The weights and
the arithmetic's results are the same; only the kernels differ.
"""

from __future__ import annotations

import runpy

import llama_cpp.llama_cpp as native

_default_params = native.llama_model_default_params


def _params_without_extra_buffers():  # type: ignore[no-untyped-def]
    params = _default_params()
    params.use_extra_bufts = False
    return params


if __name__ == "__main__":
    native.llama_model_default_params = _params_without_extra_buffers
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
