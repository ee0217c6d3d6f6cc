"""Run the MCP gateway on its own.

    python -m rollout.gateway --config conf/gateways/rag_dense_only.json --port 8080

Serves the built-in demo knowledge base unless `--corpus` names a FlashRAG jsonl corpus.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from rollout.errors import RolloutError
from rollout.gateway.config import load_gateway_file
from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway.server import bind_socket, build_gateway, plan_gateway, serve
from rollout.gateway.stats import StatsCollector, write_report
from rollout.paths import default_cache_dir

logger = logging.getLogger("rollout.gateway")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m rollout.gateway", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, help="gateway file (JSON), e.g. conf/gateways/rag_hybrid.json")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, loopback only)")
    p.add_argument("--port", type=int, default=8080, help="port to bind; 0 picks a free one")
    p.add_argument("--corpus", type=Path, help="FlashRAG jsonl corpus; default: the demo knowledge base")
    p.add_argument("--demo-passages", type=int, default=2000, help="demo KB size when --corpus is not given")
    p.add_argument("--demo-questions", type=int, default=200, help="demo question count (fixes the demo KB's cache key)")
    p.add_argument("--demo-seed", type=int, default=0)
    p.add_argument("--cache-dir", type=Path, default=None, help="index cache (default $ROLLOUT_CACHE_DIR or ~/.cache/rollout)")
    p.add_argument("--stats-dir", type=Path, default=Path("tool_stats"), help="where tool-call stats are written")
    p.add_argument("--encoder", default=None, help="sentence-transformers model name or path (default: bundled all-MiniLM-L6-v2)")
    p.add_argument("--query-prefix", default="", help='prefix for queries, e.g. "query: " for E5')
    p.add_argument("--passage-prefix", default="", help='prefix for passages, e.g. "passage: " for E5')
    p.add_argument("--bm25-k1", type=float, default=1.5)
    p.add_argument("--bm25-b", type=float, default=0.75)
    p.add_argument("--default-top-k", type=int, default=5)
    p.add_argument("--max-top-k", type=int, default=50)
    p.add_argument("--ready-file", type=Path, help="write the MCP URL here once the port is bound")
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


def load_knowledge_base(args: argparse.Namespace, requires: list[str]) -> KnowledgeBase:
    # Imported here so a bad gateway file fails fast, before torch and faiss load.
    from rollout.data import ensure_demo_kb, load_corpus
    from rollout.retrieval import Encoder, load_or_build_indexes

    cache_dir = args.cache_dir or default_cache_dir()
    corpus_path = args.corpus
    if corpus_path is None:
        kb_files = ensure_demo_kb(
            cache_dir, n_passages=args.demo_passages, n_questions=args.demo_questions, seed=args.demo_seed
        )
        corpus_path = kb_files.corpus_path
    passages = load_corpus(corpus_path)
    encoder = None
    if "dense" in requires:
        encoder = Encoder(args.encoder, query_prefix=args.query_prefix, passage_prefix=args.passage_prefix)
    retrievers = (
        load_or_build_indexes(
            passages, cache_dir, which=requires, encoder=encoder, bm25_k1=args.bm25_k1, bm25_b=args.bm25_b
        )
        if requires
        else {}
    )
    logger.info("Serving %d passages from %s with indexes: %s", len(passages), corpus_path, ", ".join(requires) or "none")
    return KnowledgeBase(passages, retrievers, default_top_k=args.default_top_k, max_top_k=args.max_top_k)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Per-call detail goes to tool stats; the SDK would log every rejected argument too.
    logging.getLogger("mcp").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        gateway = load_gateway_file(args.config)
        plan = plan_gateway(gateway)
        sock = bind_socket(args.host, args.port)
        kb = load_knowledge_base(args, plan.requires)
    except (RolloutError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    collector = StatsCollector(args.stats_dir)
    server = build_gateway(gateway, kb, collector)
    host, port = sock.getsockname()[:2]
    logger.info("Gateway %s listening on http://%s:%d/mcp", gateway.server_name, host, port)
    # uvicorn re-raises the signal that stopped it; exiting through Python keeps the report step.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        asyncio.run(serve(server, sock, ready_file=args.ready_file))
    except KeyboardInterrupt:
        pass
    finally:
        collector.close()
        write_report(args.stats_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
