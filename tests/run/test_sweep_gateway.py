"""The gateway a sweep's jobs share: which jobs share it, and that it stops when the sweep ends, however it ends.

(The sweep on the command line, one gateway per gateway file and each job's calls in its own ledger, is
tests/run/test_exit_status.py's sweep scenario.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout.run.config import compose_run_config
from rollout.run.gateway_kinds import gateway_args
from rollout.run.sweep_gateway import GatewayKey, gateway_for_the_sweep, gateway_process
from tests.gateway.test_process import call, demo_args


def key_of(*overrides: str, retriever_file: str = "r.json", host: str = "127.0.0.1", token: str | None = None):
    cfg = compose_run_config(*overrides)
    args = gateway_args(cfg.gateway_launch, Path("corpus.jsonl"), Path(retriever_file))
    return GatewayKey.of(args, cfg.retriever.to_dict(), host, token)


def test_jobs_differing_in_folder_agent_or_temporary_file_share_a_gateway_and_other_gateway_settings_do_not():
    first = key_of("mode=sparse", "output_dir=/r/a", "agent.top_k=1", retriever_file="/tmp/one/retriever.json")
    assert key_of("mode=sparse", "output_dir=/r/b", "agent.top_k=3", retriever_file="/tmp/two/retriever.json") == first
    for other in (key_of("mode=hybrid", "output_dir=/r/a"), key_of("mode=sparse", "retriever.sparse.k1=0.9"),
                  key_of("mode=sparse", "gateway.default_top_k=7"), key_of("mode=sparse", "cache_dir=/elsewhere"),
                  key_of("mode=sparse", "verbose=2"), key_of("mode=sparse", host="10.0.0.2"),
                  key_of("mode=sparse", token="another")):
        assert other != first
    assert "another" not in repr(key_of("mode=sparse", token="another"))


def test_the_sweeps_gateway_serves_the_jobs_with_its_arguments_and_is_stopped_when_the_sweep_is_interrupted(
        cache_dir, tmp_path, caplog):
    retriever = compose_run_config().retriever.to_dict()

    def job(folder: str, *extra: str):
        def args_for(retriever_config: Path) -> list[str]:
            return [*demo_args(cache_dir, tmp_path / folder), "--retriever-config", str(retriever_config), *extra]
        return gateway_process(args_for, retriever, host="127.0.0.1", auth_token=None, ready_timeout_s=300)

    caplog.set_level("INFO", logger="rollout.run.sweep_gateway")
    with pytest.raises(KeyboardInterrupt), gateway_for_the_sweep():
        with job("job-1") as first:
            url = first.wait_ready()
            retriever_file = Path(first.args[first.args.index("--retriever-config") + 1])
        assert first.is_alive() and retriever_file.is_file()  # kept, with its files, past the job that started it
        with job("job-2") as second:
            assert second is first
            assert not call(url, "c1")["is_error"]
        assert f"Using the sweep's gateway at {url}" in caplog.text
        with job("job-3", "--default-top-k", "3") as third:  # another gateway: the kept one goes first
            assert third is not first and not first.is_alive() and not retriever_file.exists()
            assert third.is_alive()
            raise KeyboardInterrupt  # Ctrl-C in the middle of a job (its gateway still loading)
    assert not third.is_alive() and third.pid is None
