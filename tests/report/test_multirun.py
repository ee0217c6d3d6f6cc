"""`CompareOnMultirunEnd`: a sweep's runs compared at its end, and never a crash."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

from rollout.paths import CONF_DIR
from rollout.report.compare.tables import COMPARISON_COSTS_PNG, COMPARISON_MD, COMPARISON_PNG
from rollout.run.multirun import CompareOnMultirunEnd
from rollout.run_folder import FINGERPRINT_FILE
from tests.report.test_compare import dense_tasks, make, sparse_tasks
from tests.report.test_compare_accounting import dense_run, sparse_run


def sweep_config(sweep_dir):
    return OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep_dir)}}})


def test_the_sweep_folder_runs_are_compared(tmp_path):
    make(tmp_path, "dense", "dense", dense_tasks())
    make(tmp_path, "sparse", "sparse", sparse_tasks())
    (tmp_path / "crashed").mkdir()  # a job that wrote nothing is left out
    CompareOnMultirunEnd().on_multirun_end(sweep_config(tmp_path))
    md = (tmp_path / COMPARISON_MD).read_text()
    assert "sparse vs dense: EM +0.333" in md and "crashed" not in md
    assert (tmp_path / COMPARISON_PNG).stat().st_size > 0


def test_jobs_seen_ending_are_compared_in_sweep_order(tmp_path):
    sweep = tmp_path / "sweep"
    sparse = make(sweep, "sparse", "sparse", sparse_tasks())
    dense = make(sweep, "dense", "dense", dense_tasks())
    make(sweep, "stale", "hybrid", dense_tasks())  # left by an earlier sweep: not one of these jobs
    callback = CompareOnMultirunEnd()
    for run in (sparse, dense):  # as Hydra calls it after each job
        callback.on_job_end(OmegaConf.create({"output_dir": str(run)}), SimpleNamespace(cfg=None))
    callback.on_multirun_end(sweep_config(sweep))
    md = (sweep / COMPARISON_MD).read_text()
    assert "dense vs sparse: EM -0.333" in md  # the first job swept is the baseline
    assert "hybrid" not in md


def test_no_runs_does_nothing(tmp_path):
    CompareOnMultirunEnd().on_multirun_end(sweep_config(tmp_path / "never_made"))
    (tmp_path / "empty").mkdir()
    CompareOnMultirunEnd().on_multirun_end(sweep_config(tmp_path / "empty"))
    make(tmp_path / "one", "dense", "dense", dense_tasks())
    CompareOnMultirunEnd().on_multirun_end(sweep_config(tmp_path / "one"))
    assert not list(tmp_path.rglob(COMPARISON_MD))


def test_a_failing_comparison_is_a_warning_not_a_crash(tmp_path, caplog):
    make(tmp_path, "dense", "dense", dense_tasks())
    make(tmp_path, "sparse", "sparse", sparse_tasks())
    with caplog.at_level(logging.WARNING):
        CompareOnMultirunEnd(baseline="hybrid").on_multirun_end(sweep_config(tmp_path))
    assert "comparison of the sweep's runs skipped" in caplog.text and "hybrid" in caplog.text
    assert not (tmp_path / COMPARISON_MD).exists()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        CompareOnMultirunEnd().on_multirun_end(OmegaConf.create({}))  # no hydra node at all
    assert "no hydra.sweep.dir" in caplog.text


def test_the_app_config_registers_the_callback():
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        cfg = compose("config", return_hydra_config=True)
    assert isinstance(instantiate(cfg.hydra.callbacks.compare), CompareOnMultirunEnd)


def test_jobs_are_labelled_by_the_overrides_that_differ(tmp_path):
    common = "dataset.n_passages=400"
    for top_k, tasks in ((1, dense_tasks()), (5, sparse_tasks())):
        run = make(tmp_path, f"sparse,agent.top_k={top_k},{common}", "sparse", tasks)
        (run / FINGERPRINT_FILE).write_text(json.dumps({"overrides": [f"agent.top_k={top_k}", common]}))
    CompareOnMultirunEnd().on_multirun_end(sweep_config(tmp_path))
    md = (tmp_path / COMPARISON_MD).read_text()
    assert "sparse,agent.top_k=5 vs sparse,agent.top_k=1: EM +0.333" in md
    assert "n_passages" not in md.split("## Runs")[0]  # shared by every job: not part of a label


def test_a_sweep_whose_runs_have_accounting_gets_the_costs_figure_and_columns(tmp_path):
    make(tmp_path, "dense", "dense", dense_run())
    make(tmp_path, "sparse", "sparse", sparse_run())
    CompareOnMultirunEnd().on_multirun_end(sweep_config(tmp_path))
    md = (tmp_path / COMPARISON_MD).read_text()
    assert "context vs dense" in md and "; context tokens per task -40%" in md
    assert f"]({COMPARISON_COSTS_PNG})" in md and (tmp_path / COMPARISON_COSTS_PNG).stat().st_size > 0


def test_a_refused_sweep_leaves_multirun_yaml_as_it_found_it(tmp_path):
    from hydra.core.utils import JobReturn, JobStatus

    from rollout.run.outcome import EXIT_BAD_INPUT, EXIT_OK, JobEnd

    def sweep(codes: list[int], sweep_dir):
        callback = CompareOnMultirunEnd()
        callback.on_multirun_start(sweep_config(sweep_dir))
        (sweep_dir / "multirun.yaml").parent.mkdir(parents=True, exist_ok=True)
        (sweep_dir / "multirun.yaml").write_text("new sweep\n")  # as Hydra's sweeper writes it before the jobs
        for code in codes:
            callback.on_job_end(OmegaConf.create({}), JobReturn(status=JobStatus.COMPLETED, _return_value=JobEnd(code)))
        callback.on_multirun_end(sweep_config(sweep_dir))

    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "multirun.yaml").write_text("earlier sweep\n")
    sweep([EXIT_BAD_INPUT, EXIT_BAD_INPUT], earlier)
    assert (earlier / "multirun.yaml").read_text() == "earlier sweep\n"
    sweep([EXIT_BAD_INPUT, EXIT_OK], earlier)  # a sweep that ran a job is described by its own
    assert (earlier / "multirun.yaml").read_text() == "new sweep\n"
    sweep([EXIT_BAD_INPUT], tmp_path / "none" / "before")
    assert not (tmp_path / "none" / "before").exists()


def test_a_refused_sweep_from_the_command_line_keeps_the_earlier_multirun_yaml(tmp_path):
    from tests.run.test_exit_status import python_m_rollout

    sweep_dir = tmp_path / "results" / "demo"
    sweep_dir.mkdir(parents=True)
    (sweep_dir / "multirun.yaml").write_text("earlier sweep\n")
    done = python_m_rollout("-m", "mode=sparse,dense", f"gateway_config_path={tmp_path / 'nope.json'}", cwd=tmp_path)
    assert done.returncode == 2 and "gateway file not found" in done.stderr and "Traceback" not in done.stderr
    assert (sweep_dir / "multirun.yaml").read_text() == "earlier sweep\n"
    assert sorted(p.name for p in sweep_dir.iterdir()) == ["multirun.yaml"]
