"""The standalone gateway's command line, and what its options load: the parser `python -m rollout.gateway` reads,
the knowledge base and retrieval settings it serves, the step tools' settings and its call ledger. A Ray Serve replica
(`rollout.gateway.serve_replica`) builds the same gateway from the same options."""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

from omegaconf import OmegaConf

from rollout.data import ensure_demo_kb, open_corpus
from rollout.errors import ConfigError, RetrievalError
from rollout.gateway.http_app import MCP_PATHS
from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway.retrieve_api import DEFAULT_MAX_PENDING, DEFAULT_MAX_WAIT_S
from rollout.gateway.server import DEFAULT_THREADS_PER_GROUP
from rollout.gateway.stats import StatsCollector
from rollout.gateway.steps import StepSettings
from rollout.llm.token_count import TokenCounter, load_token_counter
from rollout.logs import add_verbosity_options
from rollout.paths import CONF_DIR, default_cache_dir
from rollout.records import Passage
from rollout.retrieval import Retriever, load_or_build_indexes
from rollout.retrieval.params import RetrievalParams
from rollout.run_folder import CALLS_FILE, STATS_DIR
from rollout.wire import MAX_DOCS_PER_CALL, TOKEN_ENV

logger = logging.getLogger("rollout.gateway")


def build_parser(prog: str = "python -m rollout.gateway") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Run the MCP gateway on its own.")
    p.add_argument("--config", required=True, help="gateway file (JSON), e.g. conf/gateways/rag_hybrid.json")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, loopback only)")
    p.add_argument("--port", type=int, default=8080, help="port to bind; 0 picks a free one")
    p.add_argument("--corpus", type=Path,
                   help="a FlashRAG jsonl corpus file, or a folder of documents (its .txt/.md files, id = relative path, "
                        "cut into 200-word passages); default: the demo knowledge base")
    p.add_argument("--demo-passages", type=int, default=2000, help="demo KB size when --corpus is not given")
    p.add_argument("--demo-questions", type=int, default=200, help="demo question count (fixes the demo KB's cache key)")
    p.add_argument("--demo-seed", type=int, default=0)
    p.add_argument("--cache-dir", type=Path, default=None, help="index cache (default $ROLLOUT_CACHE_DIR or ~/.cache/rollout)")
    p.add_argument("--output-dir", type=Path, default=None,
                   help="record tool-call stats in OUTPUT_DIR/tool_stats and write its report.json on exit "
                        "(default: no stats are recorded)")
    p.add_argument("--run-ledger", nargs=2, action="append", default=[], metavar=("RUN_ID", "DIR"),
                   help="record the calls of run RUN_ID (request _meta rollout/run_id) in DIR/tool_stats, as "
                        "POST /runs registers one; may be repeated (a restarted gateway is given its runs this way)")
    p.add_argument("--report", action=argparse.BooleanOptionalAction, default=True,
                   help="with --output-dir, write tool_stats/report.json when the gateway stops (default); a run "
                        "passes --no-report and writes it itself, so its gateway stops at once")
    p.add_argument(
        "--retriever-config", type=Path, default=CONF_DIR / "retriever" / "default.yaml",
        help="index parameters (YAML or JSON, the shape of conf/retriever/default.yaml)",
    )
    p.add_argument("--tokenizer", default=None,
                   help="tokenizer that counts context tokens and cuts token budgets: a tokenizer.json file, a folder "
                        "holding one, or a Hugging Face name (default: the bundled encoder's)")
    p.add_argument("--llm-config", default=None,
                   help="an llm: block as JSON, inline or in a file (base_url, model, api_key_env naming the key's "
                        "variable, ...): filter_documents and generate_answer ask this endpoint (default: their "
                        "offline scorer and reader)")
    p.add_argument("--offline-steps", action=argparse.BooleanOptionalAction, default=True,
                   help="without --llm-config, filter and generate offline (encoder score, extractive reader); "
                        "--no-offline-steps makes them answer with an error instead")
    p.add_argument("--sources-root", type=Path, default=None,
                   help="the folder a folder corpus was read from: search_sources paths are relative to it "
                        "(default: --corpus when it is a folder)")
    p.add_argument("--default-top-k", type=int, default=5)
    p.add_argument("--max-top-k", type=int, default=50)
    p.add_argument("--default-max-docs", type=int, default=10,
                   help="documents search_documents, retrieve_documents and search_sources return when a call does "
                        f"not say (default 10; 1 to {MAX_DOCS_PER_CALL})")
    p.add_argument("--transport", choices=list(MCP_PATHS), default="streamable-http",
                   help="MCP transport: streamable-http (at /mcp, default) or sse (at /sse, for older clients)")
    p.add_argument("--auth-token", default=None,
                   help=f"require 'Authorization: Bearer TOKEN' on every route (default: ${TOKEN_ENV}; prefer the "
                        "variable, a command line is visible to other users)")
    p.add_argument("--threads-per-group", type=int, default=DEFAULT_THREADS_PER_GROUP,
                   help=f"worker threads each tool group's calls may use at once (default "
                        f"{DEFAULT_THREADS_PER_GROUP}): a group whose calls hang cannot starve the others")
    p.add_argument("--retrieve-max-pending", type=int, default=DEFAULT_MAX_PENDING,
                   help=f"queries POST /retrieve works on at once; a request that would go over waits its turn, "
                        f"first come first served (default {DEFAULT_MAX_PENDING}); a request of more is answered 413")
    p.add_argument("--retrieve-max-wait-s", type=float, default=DEFAULT_MAX_WAIT_S,
                   help=f"seconds a POST /retrieve request may wait for its turn before it is answered 429 with "
                        f"Retry-After (default {DEFAULT_MAX_WAIT_S:g}; 0 refuses at once)")
    p.add_argument("--tool-timeout-s", type=float, default=None,
                   help="answer a tool call still running after this many seconds with an error (outcome timeout)")
    p.add_argument("--ready-file", type=Path, help="write the MCP URL here once the port is bound")
    p.add_argument("--verl-tools", type=Path, metavar="FILE.yaml",
                   help="write verl's tool config for this gateway (one GatewayTool per offered tool, with its "
                        "schema and the URL --host, --port and --transport give) to FILE.yaml and exit without "
                        "serving; no corpus or index is loaded")
    add_verbosity_options(p)
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def load_knowledge_base(args: argparse.Namespace, requires: list[str],
                        params: RetrievalParams | None = None) -> KnowledgeBase:
    """The passages and the indexes `requires` names, each index answering one query before this returns.

    `params` default to the file `--retriever-config` names."""
    started = time.perf_counter()
    cache_dir = args.cache_dir or default_cache_dir()
    corpus_path = corpus_of(args, cache_dir)
    passages = open_corpus(corpus_path, cache_dir)
    read = time.perf_counter()
    params = params or load_retrieval_params(args.retriever_config)
    retrievers = load_or_build_indexes(passages, cache_dir, which=requires, params=params) if requires else {}
    loaded = time.perf_counter()
    if passages:
        # The first query pays for lazy initialisation (the encoder's first forward pass, compiled kernels);
        # paying it here means the gateway reports ready only when a call is as fast as the next one.
        for retriever in retrievers.values():
            retriever.search([passages[0].title or passages[0].text[:80]], 1)
    warmed = time.perf_counter()
    logger.info("Serving %d passages from %s with indexes: %s", len(passages), corpus_path, ", ".join(requires) or "none")
    # Module imports (faiss, torch, bm25s come with the retrieval package) happen before main() and show in the
    # run's timeline as the rest of the time to "gateway ready".
    logger.info("Knowledge base ready in %.1f s: corpus %.1f s, indexes %.1f s, first query %.1f s",
                warmed - started, read - started, loaded - read, warmed - loaded)
    kb = knowledge_base(args, passages, retrievers, tokenizer=load_token_counter(args.tokenizer))
    kb.snippet_tokens = params.snippet.max_tokens  # BrowseComp-Plus' search tool (`retriever.snippet`)
    if params.snippet.tokenizer is not None:  # loaded now: a bad name fails the start, not the first search
        try:
            kb.snippet_tokenizer = load_token_counter(params.snippet.tokenizer)
        except RetrievalError as e:  # its message names `tokenizer=`: this is the snippets' own setting
            raise RetrievalError(f"retriever.snippet.{e}") from e
    return kb


def knowledge_base(args: argparse.Namespace, passages: list[Passage] | None = None,
                   retrievers: dict[str, Retriever] | None = None, tokenizer: TokenCounter | None = None
                   ) -> KnowledgeBase:
    """A knowledge base with the defaults and limits the options set (the tools' input schemas state them)."""
    return KnowledgeBase(passages or [], retrievers or {}, default_top_k=args.default_top_k, max_top_k=args.max_top_k,
                         default_max_docs=args.default_max_docs, tokenizer=tokenizer, steps=step_settings(args))


def step_settings(args: argparse.Namespace) -> StepSettings:
    """How the step tools score and answer: `--llm-config`'s endpoint, else offline unless `--no-offline-steps`."""
    llm = None
    if args.llm_config is not None:
        from rollout.llm.settings import LLMSettings

        raw = str(args.llm_config)
        try:
            # Inline from a run (a Serve replica on another node has no copy of the driver's files), or a file.
            block = json.loads(raw if raw.lstrip().startswith("{") else Path(raw).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ConfigError(f"--llm-config {raw}: not a readable JSON llm block ({e})") from e
        llm = LLMSettings.from_config(block)
    sources_root = args.sources_root
    if sources_root is None and args.corpus is not None and Path(args.corpus).is_dir():
        sources_root = Path(args.corpus)  # a folder corpus served alone: its paths, as a run's gateway has them
    return StepSettings(llm=llm, offline=args.offline_steps, sources_root=sources_root)


def corpus_of(args: argparse.Namespace, cache_dir: Path) -> Path:
    """The corpus file or folder `--corpus` names, else the demo knowledge base's (generated into `cache_dir` once)."""
    if args.corpus is not None:
        return Path(args.corpus)
    return ensure_demo_kb(
        cache_dir, n_passages=args.demo_passages, n_questions=args.demo_questions, seed=args.demo_seed
    ).corpus_path


def load_retrieval_params(path: Path) -> RetrievalParams:
    if not path.is_file():
        raise ConfigError(f"retriever config not found: {path}. Pass --retriever-config conf/retriever/default.yaml")
    raw = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    return RetrievalParams.from_dict(raw if isinstance(raw, dict) else {})


def option_error(args: argparse.Namespace) -> str | None:
    """What is wrong with options argparse cannot check alone; None when nothing is."""
    if args.tool_timeout_s is not None and args.tool_timeout_s <= 0:
        return f"--tool-timeout-s must be positive, got {args.tool_timeout_s:g}"
    if args.threads_per_group < 1:
        return f"--threads-per-group must be at least 1, got {args.threads_per_group}"
    if args.retrieve_max_pending < 1:
        return f"--retrieve-max-pending must be at least 1, got {args.retrieve_max_pending}"
    if not args.retrieve_max_wait_s >= 0:
        return f"--retrieve-max-wait-s must be 0 or more seconds, got {args.retrieve_max_wait_s:g}"
    if not 1 <= args.default_max_docs <= MAX_DOCS_PER_CALL:
        return f"--default-max-docs must be between 1 and {MAX_DOCS_PER_CALL}, got {args.default_max_docs}"
    return None


def open_collector(args: argparse.Namespace, ledger_name: str = CALLS_FILE) -> StatsCollector | None:
    """The ledger `--output-dir` asks for (None without one, and the log says how to get one)."""
    if args.output_dir is None:
        logger.info("Tool-call stats are not recorded: pass --output-dir DIR to keep them in DIR/%s", STATS_DIR)
        return None
    return StatsCollector(args.output_dir / STATS_DIR, ledger_name)
