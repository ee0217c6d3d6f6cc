"""Named mutations of the modules whose contracts users rely on, each run against the tests that should kill it.

    python -m tests.mutation.run_mutants                       # every mutant, then the table
    python -m tests.mutation.run_mutants --only auth-exempt-sse --only judge-key-without-sampling
    python -m tests.mutation.run_mutants --list                # the mutants, nothing run

A mutant is a name, a file, an exact snippet of its source and what replaces it, and the test files that should
fail on it. Before anything runs, every snippet must be found exactly once in its file: a mutant whose code has
changed stops the run naming it, so the mutants stay valid as the code moves. The project's code and tests are
copied to a temporary directory and each mutant is applied there, one at a time, and restored after its run: the
work tree is never written, so Ctrl-C or an error leaves it as it was. The copy's tests first run unmutated (the
baseline; a failure there stops the run, since a kill would then mean nothing); then each mutant's tests run with
`pytest -n 0 -q -x` under a per-mutant timeout. The table says, per mutant, whether a test failed (killed), all
passed (survived) or the run passed its timeout (timeout, counted as killed: a hang is a failure a user would
see), and how long it took; under it, each survivor with why it is harmless (`Mutant.harmless`). The exit
status is 1 when a mutant survived that no such note explains.

It is not part of the suite (its name is not test_*): it runs the suite's tests many times over, minutes of CPU.
The survivors of the last run, and why each is harmless, are in docs/architecture.md ("Mutation testing").
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]
COPIED = ("rollout", "envs", "tests", "conf", "docs", "pyproject.toml", "README.md")
"""What of the project the copy holds: the code, its tests and what they read."""
DEFAULT_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Mutant:
    """One planted bug: `old` (found exactly once in `file`) becomes `new`; `tests` should then fail."""

    name: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    harmless: str = ""
    """Why the mutant's survival is harmless, when it is known to survive (an equivalent mutant: same answers, or a
    cost only a benchmark sees); printed under the table, and its survival does not fail the run."""


BM25_BUILD = "rollout/retrieval/bm25_build.py"
BM25_BUILD_TESTS = ("tests/retrieval/test_bm25_build.py",)
STORE = "rollout/data/corpus_store.py"
STORE_TESTS = ("tests/data/test_corpus_store.py",)
STATS = "rollout/gateway/stats.py"
SCORING = "rollout/report/scoring.py"
METRICS = "rollout/report/metrics.py"
JUDGE = "rollout/report/judge/grader.py"
AUTH = "rollout/gateway/auth.py"
CONTEXT = "rollout/llm/context_window.py"
TOP_K = "rollout/retrieval/base.py"
KERNELS = "rollout/retrieval/bm25_kernels.py"
SCORERS = "rollout/retrieval/bm25_scorers.py"
RETRIEVE = "rollout/gateway/retrieve_api.py"
RETRIEVE_REQUEST = "rollout/gateway/retrieve_request.py"

LEDGER_TESTS = ("tests/gateway/test_call_outcomes.py", "tests/gateway/test_stats.py", "tests/gateway/test_run_ledgers.py")
SCORING_TESTS = ("tests/report/test_scoring.py", "tests/report/test_scoring_stream.py")
JUDGE_TESTS = ("tests/report/test_judge.py",)
AUTH_TESTS = ("tests/gateway/test_auth.py",)
CONTEXT_TESTS = ("tests/agents/test_agent_limits.py",)
BM25_TESTS = ("tests/retrieval/test_top_k.py", "tests/retrieval/test_bm25_kernels.py", "tests/retrieval/test_bm25.py")
RETRIEVE_TESTS = ("tests/gateway/test_retrieve_api.py",)

MUTANTS: tuple[Mutant, ...] = (
    # The ledger: every tools/call counted once, with its outcome.
    Mutant("stats-drop-exception-record", STATS,
           "        finally:\n            collector.record(",
           "        finally:\n            if outcome not in (\"cancelled\", \"protocol_error\"): collector.record(",
           LEDGER_TESTS),
    Mutant("stats-cancel-as-protocol-error", STATS,
           'outcome = "cancelled" if _is_cancellation(e) else "protocol_error"', 'outcome = "protocol_error"',
           LEDGER_TESTS),
    Mutant("stats-catch-exception-only", STATS, "        except BaseException as e:", "        except Exception as e:",
           LEDGER_TESTS),
    Mutant("stats-no-flush", STATS,
           "        self._file.write(_line(stat))\n        self._file.flush()", "        self._file.write(_line(stat))",
           LEDGER_TESTS),
    Mutant("stats-run-id-ignored", STATS,
           "return self._by_run.get(run_id, self.default) if isinstance(run_id, str) else self.default",
           "return self.default", LEDGER_TESTS),
    Mutant("stats-duration-in-seconds", STATS, "duration_ms=(time.perf_counter() - t0) * 1000.0,",
           "duration_ms=(time.perf_counter() - t0),", LEDGER_TESTS),
    # Scoring: per task, then over repeats.
    Mutant("scoring-failed-answer-right", SCORING,
           '"exact_match": (exact_match(r.prediction, r.golden_answers) if answered else 0.0) if scored else None,',
           '"exact_match": (exact_match(r.prediction, r.golden_answers) if answered else 1.0) if scored else None,',
           SCORING_TESTS),
    Mutant("scoring-score-failed-ignored", SCORING, 'return status == "ok" or score_failed', 'return status == "ok"',
           SCORING_TESTS),
    Mutant("scoring-recall-without-doc-ids", SCORING, "for i in (*c.result_ids, *c.result_doc_ids)]",
           "for i in c.result_ids]", SCORING_TESTS),
    Mutant("scoring-t-interval-ddof-0", SCORING, "float(x.std(ddof=1))", "float(x.std(ddof=0))", SCORING_TESTS),
    Mutant("scoring-interval-not-clipped", SCORING, "    return max(interval[0], 0.0), min(interval[1], 1.0)",
           "    return interval", SCORING_TESTS),
    Mutant("scoring-pass-at-k-needs-more-tries", SCORING, "for (n, c), count in per_question.items() if n >= k]",
           "for (n, c), count in per_question.items() if n > k]", SCORING_TESTS),
    Mutant("scoring-failed-calls-as-ok", SCORING, "self.failed.update(c.name for c in r.tool_calls if not c.ok)",
           "self.failed.update(c.name for c in r.tool_calls if c.ok)", SCORING_TESTS),
    Mutant("metrics-article-a-kept", METRICS, r'_ARTICLES = re.compile(r"\b(a|an|the)\b")',
           r'_ARTICLES = re.compile(r"\b(an|the)\b")', SCORING_TESTS),
    Mutant("metrics-f1-halved", METRICS, "return 2 * precision * recall / (precision + recall)",
           "return precision * recall / (precision + recall)", SCORING_TESTS),
    Mutant("metrics-contains-any-substring", METRICS, 'float(any(g and f" {g} " in pred', "float(any(g and g in pred",
           SCORING_TESTS),
    Mutant("metrics-pass-at-k-off-by-one", METRICS, "for i in range(n - c + 1, n + 1):", "for i in range(n - c, n + 1):",
           SCORING_TESTS),
    # The judge: verdicts cached per judged text and per judge identity.
    Mutant("judge-cache-keyed-on-prediction", JUDGE,
           "or cached.prediction_sha256 != prediction_hash(judged_text(task, preset)))",
           "or cached.prediction_sha256 != prediction_hash(task.prediction))", JUDGE_TESTS),
    Mutant("judge-key-without-sampling", JUDGE, "digest = hashlib.sha256(json.dumps(self.identity(), sort_keys=True)",
           'digest = hashlib.sha256(json.dumps({k: v for k, v in self.identity().items() if k != "sampling"}, '
           "sort_keys=True)", JUDGE_TESTS),
    Mutant("judge-failed-request-cached", JUDGE, "return (cached is None or cached.error is not None",
           "return (cached is None", JUDGE_TESTS),
    Mutant("judge-gold-aliases-joined-by-comma", JUDGE, 'return " | ".join(a.strip()', 'return ", ".join(a.strip()',
           JUDGE_TESTS),
    # The bearer token.
    Mutant("auth-exempt-sse", AUTH, '        if scope["type"] not in ("http", "websocket"):',
           '        if scope["type"] not in ("http", "websocket") or scope.get("path", "").startswith(("/sse", '
           '"/messages")):', AUTH_TESTS),
    Mutant("auth-token-prefix-accepted", AUTH, "if not hmac.compare_digest(token.strip(), self._expected):",
           "if not self._expected.startswith(token.strip()):", AUTH_TESTS),
    Mutant("auth-scheme-case-sensitive", AUTH, 'if scheme.lower() != b"bearer"', 'if scheme != b"Bearer"', AUTH_TESTS),
    # Context-window refusals and the budget.
    Mutant("context-413-dropped", CONTEXT, "OVERFLOW_STATUSES = frozenset({400, 413, 422})",
           "OVERFLOW_STATUSES = frozenset({400, 422})", CONTEXT_TESTS),
    Mutant("context-window-text-dropped", CONTEXT, '    r"exceeds the context window",\n', "", CONTEXT_TESTS),
    Mutant("context-tgi-inputs-dropped", CONTEXT, '    r"`inputs` must have less than \\d+ tokens",\n', "",
           CONTEXT_TESTS),
    Mutant("context-budget-off-by-one", CONTEXT, "if prompt + completion > self.window:",
           "if prompt + completion >= self.window:", CONTEXT_TESTS),
    Mutant("context-max-tokens-ignored", CONTEXT,
           'value = sampling.get("max_completion_tokens", sampling.get("max_tokens"))',
           'value = sampling.get("max_completion_tokens")', CONTEXT_TESTS),
    # BM25 ranking: the k best, ties to the lower row, only passages scoring above 0.
    Mutant("topk-ties-to-higher-row", TOP_K, "order = np.lexsort((candidates, -row_scores[candidates]))[:take]",
           "order = np.lexsort((-candidates, -row_scores[candidates]))[:take]", BM25_TESTS),
    Mutant("topk-ties-at-kth-dropped", TOP_K, "candidates = np.flatnonzero(row_scores >= kth)",
           "candidates = np.flatnonzero(row_scores > kth)", BM25_TESTS),
    Mutant("kernel-ties-at-running-kth-dropped", KERNELS, "if score > 0.0 and score >= best[0]:",
           "if score > 0.0 and score > best[0]:", BM25_TESTS),
    Mutant("kernel-no-room-for-ties", KERNELS, "fetch = min(take + _EXTRA, self.num_passages)",
           "fetch = min(take, self.num_passages)", BM25_TESTS,
           harmless="same answers, more work: with no room past the take-th score every query whose take-th score "
                    "is above 0 counts as unsure and is answered again by the exact postings kernel; the others have "
                    "fewer than take passages above 0, all inside bm25s' answer. Only the bm25s path's speed changes "
                    "(not the default path; bench/retrieval.py measures it)."),
    Mutant("rank-bm25-zero-scores-kept", SCORERS, "rows = np.flatnonzero(scores > 0)", "rows = np.flatnonzero(scores >= 0)",
           BM25_TESTS),
    Mutant("bm25s-lucene-idf", SCORERS, 'method="atire", idf_method=params.method, dtype="float64"',
           'method="atire", idf_method="lucene", dtype="float64"', BM25_TESTS),
    Mutant("bm25-build-idf-ignores-method", BM25_BUILD, "IDF[params.method](n_docs, d)", 'IDF["robertson"](n_docs, d)',
           ("tests/retrieval/test_bm25_idf.py",)),
    # POST /retrieve.
    Mutant("retrieve-request-beats-pin", RETRIEVE, 'k = route.pins.get("top_k", parsed.topk)',
           'k = parsed.topk if parsed.topk is not None else route.pins.get("top_k")', RETRIEVE_TESTS),
    Mutant("retrieve-max-top-k-exclusive", RETRIEVE_REQUEST, "not 1 <= topk <= max_top_k)", "not 1 <= topk < max_top_k)",
           RETRIEVE_TESTS),
    Mutant("retrieve-failure-unrecorded", RETRIEVE,
           "            if self.collector is not None:\n                self.collector.append(ledger_lines(self._stats(",
           "            if False:\n                self.collector.append(ledger_lines(self._stats(", RETRIEVE_TESTS),
    Mutant("retrieve-call-ids-shared", RETRIEVE, 'call_id=f"{marks.call_id}:{i}"', "call_id=marks.call_id",
           RETRIEVE_TESTS),
    Mutant("retrieve-first-query-ids-for-all", RETRIEVE, "[passages[row].id for row, _ in ranked[i]]",
           "[passages[row].id for row, _ in ranked[0]]", RETRIEVE_TESTS),
    Mutant("bm25-build-tf-without-k1-plus-one", BM25_BUILD, "((tf * (k1 + 1)) /", "((tf * k1) /", BM25_BUILD_TESTS),
    Mutant("bm25-build-unstable-columns", BM25_BUILD, 'np.argsort(terms, kind="stable")', "np.argsort(terms)",
           BM25_BUILD_TESTS),
    Mutant("bm25-build-chunk-vocab-out-of-order", BM25_BUILD, "to_global = np.fromiter((vocab.setdefault(t, len(vocab)) "
           "for t in chunk.vocab)", "to_global = np.fromiter((vocab.setdefault(t, len(vocab)) for t in "
           "sorted(chunk.vocab))", BM25_BUILD_TESTS),
    Mutant("store-hash-collision-unchecked", STORE, "if value_of(row) == value]", "]", STORE_TESTS),
    Mutant("store-repeated-id-accepted", STORE, "    _check_unique_ids(path)\n", "\n", STORE_TESTS),
)


@dataclass(frozen=True)
class Outcome:
    mutant: Mutant
    status: str
    """killed, survived or timeout."""
    seconds: float
    failed_test: str = ""
    """The first failing test pytest named, when killed."""


def check_snippets(mutants: Sequence[Mutant], root: Path) -> list[str]:
    """One line per mutant whose snippet is not found exactly once (or whose file is gone)."""
    problems = []
    for m in mutants:
        path = root / m.file
        if not path.is_file():
            problems.append(f"{m.name}: {m.file} does not exist")
            continue
        found = path.read_text(encoding="utf-8").count(m.old)
        if found != 1:
            problems.append(f"{m.name}: its snippet is found {found} times in {m.file}, not once: update the mutant")
    return problems


def copy_project(dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", "*.nbi", "*.nbc")
    for name in COPIED:
        source = PROJECT / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=ignore)
        elif source.exists():
            shutil.copy2(source, dest / name)


def run_tests(root: Path, tests: Sequence[str], timeout_s: float, scratch: Path, numba_cache: Path) -> tuple[str, str]:
    """Run `tests` in the copy at `root`: (killed | survived | timeout, the first failing test's id)."""
    scratch.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "PYTHONDONTWRITEBYTECODE": "1", "ROLLOUT_CACHE_DIR": str(scratch / "cache"),
           "NUMBA_CACHE_DIR": str(numba_cache)}
    command = [sys.executable, "-m", "pytest", "-n", "0", "-q", "-x", "-p", "no:cacheprovider",
               "--basetemp", str(scratch / "pytest"), *tests]
    proc = subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return "timeout", ""
    except BaseException:  # Ctrl-C: take the run's whole process group down with us
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    if proc.returncode == 0:
        return "survived", ""
    failed = next((line.split(" ", 1)[1].split(" - ", 1)[0] for line in out.splitlines()
                   if line.startswith(("FAILED ", "ERROR "))), "")
    return "killed", failed or f"pytest exit {proc.returncode}"


def check_copy_is_imported(root: Path) -> None:
    """The copy's `rollout`, not the installed one, must be what its tests import."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    found = subprocess.run([sys.executable, "-c", "import rollout, envs; print(rollout.__file__); print(envs.__file__)"],
                           cwd=root, env=env, capture_output=True, text=True, check=True).stdout.split()
    if not all(Path(f).resolve().is_relative_to(root.resolve()) for f in found):
        raise SystemExit(f"the copy's tests would import {found}, not the copy under {root}: refusing to run")


def run_mutant(m: Mutant, root: Path, timeout_s: float, work: Path, shared_numba: Path) -> Outcome:
    path = root / m.file
    original = path.read_bytes()
    stat = path.stat()
    # A kernel mutant compiles into a numba cache of its own: numba keys its cache by the source file's time and
    # size, which a mutant may share with the original.
    numba_cache = work / "numba" / m.name if m.file == KERNELS else shared_numba
    t0 = time.monotonic()
    try:
        path.write_text(original.decode("utf-8").replace(m.old, m.new), encoding="utf-8")
        status, failed = run_tests(root, m.tests, timeout_s, work / "runs" / m.name, numba_cache)
    finally:
        path.write_bytes(original)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the shared numba cache stays valid
    return Outcome(m, status, time.monotonic() - t0, failed)


def table(outcomes: Sequence[Outcome]) -> str:
    rows = [("mutant", "file", "result", "seconds", "killed by")]
    rows += [(o.mutant.name, o.mutant.file.removeprefix("rollout/"), o.status, f"{o.seconds:.1f}", o.failed_test)
             for o in outcomes]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(widths[i]) if i < 4 else cell for i, cell in enumerate(row)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    killed = sum(o.status != "survived" for o in outcomes)
    lines.append("")
    lines.append(f"mutants {len(outcomes)}, killed {killed}, survived {len(outcomes) - killed}"
                 + (f" (timeouts counted as killed: {sum(o.status == 'timeout' for o in outcomes)})"
                    if any(o.status == "timeout" for o in outcomes) else ""))
    for o in outcomes:
        if o.status == "survived":
            lines.append(f"  {o.mutant.name}: " + (f"harmless: {o.mutant.harmless}" if o.mutant.harmless else
                                                   "NOT EXPLAINED: add a test that kills it, or say why it is harmless"))
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.mutation.run_mutants", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", metavar="NAME", help="run only this mutant (repeatable)")
    parser.add_argument("--timeout-s", type=float, default=DEFAULT_TIMEOUT_S, help="per mutant (default 300)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated run of the tests")
    return parser.parse_args(argv)


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM as Ctrl-C: the mutant's tests are killed and the copy is removed


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupted)
    names = {m.name for m in MUTANTS}
    if len(names) != len(MUTANTS):
        raise SystemExit("two mutants share a name")
    unknown = sorted(set(args.only or ()) - names)
    if unknown:
        raise SystemExit(f"unknown mutant {', '.join(unknown)}; the mutants: {', '.join(sorted(names))}")
    mutants = [m for m in MUTANTS if not args.only or m.name in args.only]
    if args.list:
        for m in mutants:
            print(f"{m.name:40} {m.file}")
        return 0
    problems = check_snippets(mutants, PROJECT)
    if problems:
        raise SystemExit("mutants that no longer match the code:\n  " + "\n  ".join(problems))
    with tempfile.TemporaryDirectory(prefix="rollout-mutants-") as tmp:
        work = Path(tmp)
        root = work / "project"
        copy_project(root)
        check_copy_is_imported(root)
        shared_numba = work / "numba" / "shared"
        if not args.no_baseline:
            tests = sorted({t for m in mutants for t in m.tests})
            print(f"baseline: {len(tests)} test files, unmutated ...", flush=True)
            status, failed = run_tests(root, tests, args.timeout_s * 3, work / "runs" / "baseline", shared_numba)
            if status != "survived":
                raise SystemExit(f"the unmutated tests do not pass ({status}: {failed}): fix them first")
        outcomes = []
        for i, m in enumerate(mutants, 1):
            outcome = run_mutant(m, root, args.timeout_s, work, shared_numba)
            outcomes.append(outcome)
            print(f"[{i}/{len(mutants)}] {m.name}: {outcome.status} ({outcome.seconds:.1f} s)", flush=True)
    print()
    print(table(outcomes))
    return 0 if all(o.status != "survived" or o.mutant.harmless for o in outcomes) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted: the copy is removed, the work tree was never written", file=sys.stderr)
        sys.exit(130)
