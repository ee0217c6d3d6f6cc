"""`rollout env` (also `python -m rollout.trainers.openenv`): serve an experiment as an OpenEnv environment.

    rollout env [KEY=VALUE ...] [--gateway-url URL] [--host H] [--port N] [--ready-file F] [--output-dir DIR]
                [--metric em|f1|contains] [-v|-q]

The experiment is named by the Hydra overrides a run takes (`mode=hybrid agent=search_r1 dataset.limit=100`). Its
tools come from the gateway at `--gateway-url`, or (by default) from a gateway started here with the experiment's
gateway file, corpus and settings, as a run starts one, and stopped on exit; that gateway records every call in
`--output-dir`/tool_stats/. With `$ROLLOUT_GATEWAY_TOKEN` set, the environment and the gateway both require it.
Bad arguments print one line to stderr and exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import socket
import sys
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import uvicorn

from rollout.errors import RolloutError
from rollout.listen import bind_socket
from rollout.logs import add_verbosity_options, configure_logging, verbosity
from rollout.trainers.experiment import TrainingExperiment
from rollout.trainers.reward import DEFAULT_METRIC, METRICS
from rollout.wire import resolve_token, warn_if_unguarded

logger = logging.getLogger("rollout.trainers.openenv")

DEFAULT_PORT = 8001
"""Not OpenEnv's usual 8000, which is also where an OpenAI-compatible server (`llm.base_url`) listens by default."""
STOP_GRACE_S = 5.0


def build_parser(prog: str = "python -m rollout.trainers.openenv") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Serve an experiment (its questions, the tools of its gateway file, rollout's score as the reward) "
                    "as an OpenEnv environment: WebSocket /ws, /reset, /step, /state, /schema, /health.",
    )
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="the experiment, as Hydra overrides of conf/ (those `rollout run` takes), e.g. mode=hybrid "
                        "agent=search_r1 dataset.limit=100; none: the demo")
    p.add_argument("--gateway-url", metavar="URL",
                   help="MCP URL of a running gateway serving the experiment's gateway file; default: start one "
                        "(stopped on exit)")
    p.add_argument("--output-dir", type=Path, metavar="DIR",
                   help="where a gateway started here records every tool call (DIR/tool_stats/); default "
                        "results/openenv/<experiment>/<mode>")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, loopback only)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: a free one)")
    p.add_argument("--ready-file", type=Path, metavar="FILE",
                   help="write the environment's base URL (http://HOST:PORT) here once it serves")
    p.add_argument("--metric", choices=list(METRICS), default=DEFAULT_METRIC,
                   help=f"the reward: this score of the answer (default {DEFAULT_METRIC})")
    add_verbosity_options(p)
    return p


def default_output_dir(experiment: TrainingExperiment) -> Path:
    """results/openenv/<experiment>/<mode>: beside the evaluation's run folders, never inside one."""
    return Path("results", "openenv", *experiment.config.output_dir.parts[-2:])


@contextlib.contextmanager
def experiment_gateway(experiment: TrainingExperiment, url: str | None, output_dir: Path) -> Iterator[str]:
    """The MCP URL of the experiment's gateway: `url` (or the experiment's `gateway.url`), else one started here
    from the experiment's gateway file and corpus, as a run starts it, and stopped when this exits."""
    url = url or experiment.config.gateway.url
    if url:
        yield url
        return
    # Imported here: starting a gateway loads the run's machinery, which serving on a running one never needs.
    from rollout.data.dataset import data_sources
    from rollout.data.materialize import materialize_corpus
    from rollout.run.gateway_kinds import gateway_for_run

    cfg = replace(experiment.config, output_dir=output_dir)
    corpus, _ = data_sources(cfg.dataset, cfg.cache_dir)
    with gateway_for_run(cfg.gateway_launch, materialize_corpus(corpus, cfg.cache_dir)) as gateway:
        yield gateway.wait_ready()


async def serve(experiment: TrainingExperiment, gateway_url: str, sock: socket.socket, *, metric: str,
                token: str | None, ready_file: Path | None) -> None:
    """List the gateway's tools, then serve on `sock` until signalled; the base URL goes to `ready_file` first."""
    from rollout.trainers.openenv.episode import ServedExperiment
    from rollout.trainers.openenv.routes import create_app
    from rollout.trainers.tool_session import GatewayTarget

    served = await ServedExperiment.open(experiment, GatewayTarget(gateway_url, experiment.gateway_file, token),
                                         metric)
    host, port = sock.getsockname()[:2]
    base = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    names = ", ".join(t.name for t in served.tools)
    logger.info("OpenEnv environment on %s (WebSocket %s/ws%s): %d questions, mode %s, tools %s; reward %s; "
                "text actions %s", base, base.replace("http", "ws", 1), ", bearer token required" if token else "",
                len(served.questions), experiment.mode, names, metric, "on" if served.no_text is None else "off")
    if ready_file is not None:
        tmp = ready_file.with_suffix(".tmp")
        tmp.write_text(base + "\n", encoding="utf-8")
        tmp.replace(ready_file)
    app = create_app(served, host=host, token=token)
    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=STOP_GRACE_S)
    await uvicorn.Server(config).serve(sockets=[sock])


def main(argv: Sequence[str] | None = None, *, prog: str = "python -m rollout.trainers.openenv") -> int:
    """Serve until stopped (Ctrl-C, SIGTERM); a bad experiment, gateway or port prints one line and returns 2."""
    args = build_parser(prog).parse_intermixed_args(argv)
    configure_logging(verbosity(args))
    token = resolve_token(None)
    try:
        experiment = TrainingExperiment.compose(args.overrides)
        sock = bind_socket(args.host, args.port)
    except (RolloutError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    warn_if_unguarded(logger, "The environment", args.host, token, "play episodes and call its tools")
    # uvicorn re-raises the signal that stopped it; exiting through Python stops the gateway started here.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        with experiment_gateway(experiment, args.gateway_url, args.output_dir or default_output_dir(experiment)) as url:
            asyncio.run(serve(experiment, url, sock, metric=args.metric, token=token, ready_file=args.ready_file))
    except RolloutError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
