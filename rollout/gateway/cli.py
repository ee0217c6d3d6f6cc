"""The gateway on its own: `python -m rollout.gateway` and `rollout gateway`.

    python -m rollout.gateway --config conf/gateways/rag_dense_only.json --port 8080

Serves the built-in demo knowledge base unless `--corpus` names a corpus: a FlashRAG jsonl file, or a
folder of documents as a run's `dataset.corpus.path` takes (its .txt/.md files, search_sources scoped to it).
MCP is at http://HOST:PORT/mcp (or /sse with `--transport sse`), the flat-parameter proxy at
POST /proxy/tools/NAME/call, the trainers' retrieval API (Search-R1's and rLLM's) at POST /retrieve, the health check
at /healthz. With a token (`$ROLLOUT_GATEWAY_TOKEN`
or `--auth-token`) every route requires `Authorization: Bearer TOKEN`. Tool-call stats are recorded
only with `--output-dir DIR` (DIR/tool_stats, with its report.json written when the gateway stops):
nothing is written into the working directory unless asked. A run registers its own folder with POST /runs
(`rollout.gateway.runs_api`): the calls it makes go there instead.

`--verl-tools FILE.yaml` writes verl's tool config for the gateway these options describe and exits without
serving (`rollout.trainers.verl_config`; docs/trainers.md, section verl).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from rollout.errors import RolloutError
from rollout.gateway.http_app import MCP_PATHS
from rollout.gateway.launch import build_parser, knowledge_base, load_knowledge_base, open_collector, option_error
from rollout.gateway.orphan import watch_parent
from rollout.gateway.plan import plan_gateway
from rollout.gateway.server import build_gateway, serve
from rollout.gateway.stats import RunLedgers
from rollout.gateway_file import load_gateway_file
from rollout.listen import bind_socket
from rollout.logs import configure_logging, verbosity
from rollout.wire import resolve_token, warn_if_unguarded

logger = logging.getLogger("rollout.gateway")


def main(argv: list[str] | None = None, *, prog: str = "python -m rollout.gateway") -> int:
    """Serve until stopped (Ctrl-C, SIGTERM); a bad gateway file, port or option prints one line and returns 2."""
    args = build_parser(prog).parse_args(argv)
    # The run's format and levels (a run passes its -v/-q on): per-call detail is in the tool stats, not the log.
    configure_logging(verbosity(args))
    watch_parent()  # launched for a run: stop when the run's process is gone
    token = resolve_token(args.auth_token)
    if (problem := option_error(args)) is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if args.verl_tools is not None:
        return write_verl_tools(args)
    try:
        gateway = load_gateway_file(args.config, option="--config")
        plan = plan_gateway(gateway)
        sock = bind_socket(args.host, args.port)
        kb = load_knowledge_base(args, plan.requires)
    except (RolloutError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    warn_if_unguarded(logger, "The gateway", args.host, token, "call its tools")
    collector = open_collector(args)
    ledgers = RunLedgers(collector)
    for run_id, folder in args.run_ledger:
        try:
            ledgers.register(run_id, Path(folder).resolve())
        except OSError as e:
            print(f"error: --run-ledger {run_id} {folder}: cannot write its ledger ({e})", file=sys.stderr)
            return 2
    host, port = sock.getsockname()[:2]
    # uvicorn re-raises the signal that stopped it; exiting through Python keeps the report step.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server = build_gateway(gateway, kb, ledgers, tool_timeout_s=args.tool_timeout_s,
                               threads_per_group=args.threads_per_group,
                               retrieve_max_pending=args.retrieve_max_pending,
                               retrieve_max_wait_s=args.retrieve_max_wait_s)
        logger.info("Gateway %s on http://%s:%d%s (%s%s)", gateway.server_name, host, port,
                    MCP_PATHS[args.transport], args.transport, ", bearer token required" if token else "")
        asyncio.run(serve(server, sock, ready_file=args.ready_file, transport=args.transport, auth_token=token))
    except RolloutError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    finally:
        ledgers.close()
        if collector is not None and args.report:
            write_report(args.output_dir)
    return 0


def write_verl_tools(args: argparse.Namespace) -> int:
    """`--verl-tools FILE`: verl's tool config for the gateway these options serve (`rollout.trainers.verl_config`),
    written without serving; a bad gateway file or option prints one line and returns 2."""
    from rollout.trainers.verl_config import write_verl_tool_config  # the trainer side: only when asked

    if args.port == 0:
        print("error: --verl-tools writes the URL a trainer calls: give the --port the gateway will serve on "
              "(0 picks one only when it starts)", file=sys.stderr)
        return 2
    url = f"http://{args.host}:{args.port}{MCP_PATHS[args.transport]}"
    try:
        names = write_verl_tool_config(args.verl_tools, Path(args.config), url, knowledge_base(args))
    except (RolloutError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {len(names)} verl tools ({', '.join(names)}) for the gateway at {url} to {args.verl_tools}")
    return 0


def write_report(output_dir: Path) -> None:
    """tool_stats/report.json from the ledger just closed, as a run writes it."""
    # Imported here: the report needs pandas, which a serving gateway has no use for.
    from rollout.report.tool_calls.report import write_tool_report

    write_tool_report(output_dir)
