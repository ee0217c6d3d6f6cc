"""Corpora of the field's size: BM25 build, gateway start and serving over N synthetic passages, side by side.

    python bench/corpus_scale.py [--sizes 100000,1000000,2000000] [--baseline DIR] [--baseline-max 1000000]
                                 [--dense 1000000] [--queries 1000] [--bcp 100000] [--smoke]

Each size gets a FlashRAG corpus of N passages (a 3-word title, 100 words drawn from a Zipf law over a 500,000-word
vocabulary: 857 MB a million lines, about the size of wiki-18's 100-word passages), generated once into the bench's cache. Then,
each in fresh processes, with a fresh index cache per size:

- **build**: the corpus store and the BM25 index, as a gateway's start builds them (`open_corpus`,
  `load_or_build_indexes(which=["sparse"])`): wall and CPU seconds (the process and its tokenizing workers), the
  peak over time of the anonymous memory summed over the whole process tree (RssAnon, sampled every 50 ms: what a
  budget bounds; the page cache of written files is not counted) and of its resident memory, the index's size.
- **gateway**: `rollout gateway --config conf/gateways/rag_sparse_only.json` over that cache: seconds to ready,
  resident and anonymous memory at ready and after `--queries` queries through `POST /retrieve/sparse`, q/s one
  query a request and 16 a request; then a second gateway over the same cache and the pages the two share.
- with `--baseline DIR` (a clone of an older commit), the same for that checkout (`PYTHONPATH=DIR`) at sizes up to
  `--baseline-max` (the in-memory build of old needs about 13 GB a million passages).
- with `--dense N`, a gateway over the N-passage corpus with a random flat faiss index as `retriever.dense.index_path`
  (384-d, row i = passage i): memory at ready and after the queries; with `--search-r1 DIR` (a checkout of
  Search-R1), its own retrieval server over the same corpus and index, measured the same way.
- with `--pyserini N` (the `lucene` extra installed), Pyserini's Lucene index over the N-passage corpus: its build
  (wall, CPU, whole-tree peak memory, the JVM's included), its size, and q/s through `rollout.retrieval.lucene`.

- with `--bcp N`, a corpus the size of BrowseComp-Plus': N documents of 2,000 to 4,000 words (3,000 on average; its
  ~100K documents average about that), written as its corpus is (`{"docid", "text", "url"}` rows), read through
  `dataset=browsecomp_plus`'s column mapping into the corpus store with each document one row, and BM25 built over
  the whole documents as a `mode=bcp_bm25` gateway builds it: the build's wall and CPU seconds and the peak memory
  of its whole process tree, against the budget (`retriever.sparse.build_memory_mb`) and the 3 GiB target.

It prints one table, the growth of each memory figure from size to size, and the targets of a 2M-passage corpus:
build peak anonymous <= 3 GiB and growing <= 25% from 1M to 2M; a gateway ready in <= 10 s with <= 700 MiB resident.
`--smoke` runs 2,000 passages and 50 queries, and the BrowseComp-Plus build over 100 documents (the suite runs it so
the bench keeps working).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
VOCAB = 500_000
WORDS = 100
GIB = 1024**3
MIB = 1024**2


def _seeded_file(path: Path, seed: int, chunks: Callable[[np.random.Generator, list[str]], Iterator[str]]) -> Path:
    """`path`, written once (then found) from `chunks` of a generator seeded with `seed` and the vocabulary of
    VOCAB 7-letter words it drew first: the same file in every call."""
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocab = ["".join(w) for w in letters[rng.integers(0, 26, size=(VOCAB, 7))]]
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for chunk in chunks(rng, vocab):
            f.write(chunk)
    tmp.rename(path)
    return path


def corpus_file(n: int, folder: Path) -> Path:
    """The N-passage synthetic corpus, written once (seeded: the same file in every call)."""
    def chunks(rng: np.random.Generator, vocab: list[str]) -> Iterator[str]:
        for start in range(0, n, 10_000):
            rows = min(10_000, n - start)
            words = np.minimum(rng.zipf(1.1, size=(rows, WORDS + 3)), VOCAB) - 1
            yield "".join(
                json.dumps({"id": f"p{start + i}", "contents": " ".join(vocab[w] for w in row[:3]) + "\n"
                            + " ".join(vocab[w] for w in row[3:])}) + "\n"
                for i, row in enumerate(words.tolist()))

    return _seeded_file(folder / f"zipf-{n}.jsonl", 0, chunks)


BCP_WORDS = (2000, 4000)
"""Words of a BrowseComp-Plus-sized document, drawn uniformly from this range."""


def bcp_corpus_file(n: int, folder: Path) -> Path:
    """N long documents in BrowseComp-Plus' corpus format (`docid`, `text`, `url`), written once (seeded)."""
    def chunks(rng: np.random.Generator, vocab: list[str]) -> Iterator[str]:
        words_of = np.array(vocab)
        for start in range(0, n, 1000):
            lines = []
            for i in range(start, min(n, start + 1000)):
                words = words_of[np.minimum(rng.zipf(1.1, size=int(rng.integers(*BCP_WORDS))), VOCAB) - 1]
                # Paragraphs of 100 words, as web pages break them; the first line a title, as its pages open.
                text = "\n\n".join(" ".join(words[j:j + 100]) for j in range(0, len(words), 100))
                lines.append(json.dumps({"docid": str(i), "text": text, "url": f"https://example.org/{i}"}) + "\n")
            yield "".join(lines)

    return _seeded_file(folder / f"bcp-{n}.jsonl", 35, chunks)


BCP_BUILD = """
import sys
from pathlib import Path
from rollout.data import CorpusSpec, open_corpus
from rollout.retrieval import load_or_build_indexes
corpus, cache = Path(sys.argv[1]), Path(sys.argv[2])
# dataset=browsecomp_plus's corpus columns: each document one row of the store, whole.
store = open_corpus(CorpusSpec(path=str(corpus), columns={"id": "docid", "text": "text"}), cache)
load_or_build_indexes(store, cache, which=["sparse"])
"""


def bcp_row(n: int, corpora: Path) -> dict[str, float]:
    """The corpus store and BM25 over N BrowseComp-Plus-sized documents, built in a fresh process and cache."""
    corpus = bcp_corpus_file(n, corpora)
    cache = Path(tempfile.mkdtemp(prefix=f"scale-bcp-{n}-"))
    try:
        row = measured_build("the BrowseComp-Plus build", [sys.executable, "-c", BCP_BUILD, str(corpus), str(cache)],
                             cwd=ROOT, env=env_for(ROOT))
        row["index_bytes"] = sum(p.stat().st_size for p in cache.glob("sparse-*/*") if p.is_file())
        return row
    finally:
        subprocess.run(["rm", "-rf", str(cache)], check=False)


def queries(corpus: Path, n: int) -> list[str]:
    """n queries of three words each taken from the corpus' first passages (so they match)."""
    rng = random.Random(1)
    out = []
    with corpus.open(encoding="utf-8") as f:
        for line in f:
            words = json.loads(line)["contents"].split()
            out.append(" ".join(rng.sample(words, 3)))
            if len(out) == n:
                return out
    return (out * (n // max(len(out), 1) + 1))[:n]


def tree(pid: int) -> list[int]:
    """`pid` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def status(pid: int, *fields: str) -> list[int]:
    """Fields of /proc/PID/status in bytes (0 for a process gone)."""
    values = dict.fromkeys(fields, 0)
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name in values:
                    values[name] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return [values[f] for f in fields]


def tree_memory(pid: int) -> tuple[int, int]:
    """(RssAnon, VmRSS) summed over the process tree of `pid`."""
    anon = rss = 0
    for p in tree(pid):
        a, r = status(p, "RssAnon", "VmRSS")
        anon, rss = anon + a, rss + r
    return anon, rss


@dataclass
class Peak:
    """The highest tree memory seen while a process ran."""

    anon: int = 0
    rss: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def watch(self, pid: int) -> threading.Thread:
        def run() -> None:
            while not self.stop.is_set():
                anon, rss = tree_memory(pid)
                self.anon, self.rss = max(self.anon, anon), max(self.rss, rss)
                time.sleep(0.05)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread


def env_for(checkout: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(checkout), "ROLLOUT_CACHE_DIR": "/nonexistent-use-flags"}


BUILD = """
import sys, time
from pathlib import Path
from rollout.retrieval import load_or_build_indexes
corpus, cache = Path(sys.argv[1]), Path(sys.argv[2])
try:
    from rollout.data import open_corpus
    passages = open_corpus(corpus, cache)
except ImportError:  # a checkout from before the corpus store
    from rollout.data import load_corpus
    passages = load_corpus(corpus)
load_or_build_indexes(passages, cache, which=["sparse"])
"""


def measured_build(what: str, command: list[str], **popen: object) -> dict[str, float]:
    """Run a build command to its end: wall and CPU seconds (its whole tree) and its tree's peak memory."""
    started = time.perf_counter()
    proc = subprocess.Popen(command, **popen)
    peak = Peak()
    watcher = peak.watch(proc.pid)
    _, code, usage = os.wait4(proc.pid, 0)
    peak.stop.set()
    watcher.join()
    if code:
        raise SystemExit(f"{what} failed (status {code})")
    return {"build_s": time.perf_counter() - started, "build_cpu_s": usage.ru_utime + usage.ru_stime,
            "build_anon": peak.anon, "build_rss": peak.rss}


def build(checkout: Path, corpus: Path, cache: Path) -> dict[str, float]:
    row = measured_build(f"the build in {checkout}", [sys.executable, "-c", BUILD, str(corpus), str(cache)],
                         cwd=checkout, env=env_for(checkout))
    return row | {"index_bytes": sum(p.stat().st_size for p in cache.glob("sparse-*/*") if p.is_file())}


@dataclass
class Gateway:
    proc: subprocess.Popen
    url: str
    ready_s: float

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def start_gateway(checkout: Path, corpus: Path, cache: Path, config: str, *extra: str) -> Gateway:
    folder = Path(tempfile.mkdtemp(prefix="scale-gw-"))
    ready = folder / "ready"
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "rollout.gateway", "--config", str(ROOT / config), "--corpus",
                             str(corpus), "--cache-dir", str(cache), "--port", "0", "--ready-file", str(ready),
                             "--output-dir", str(folder / "run"), "--quiet", *extra], cwd=checkout,
                            env=env_for(checkout), stdout=subprocess.DEVNULL)
    while not ready.is_file() or not ready.read_text().strip():
        if proc.poll() is not None:
            raise SystemExit(f"the gateway in {checkout} exited with {proc.returncode}")
        time.sleep(0.02)
    url = ready.read_text().strip().removesuffix("/mcp")
    return Gateway(proc, url, time.perf_counter() - started)


def serve(gw: Gateway, qs: list[str], path: str) -> dict[str, float]:
    anon0, rss0 = tree_memory(gw.proc.pid)
    out: dict[str, float] = {"ready_s": gw.ready_s, "ready_anon": anon0, "ready_rss": rss0}
    with httpx.Client(timeout=600) as client:
        for batch in (1, 16):
            started = time.perf_counter()
            for i in range(0, len(qs), batch):
                r = client.post(f"{gw.url}{path}", json={"queries": qs[i:i + batch], "topk": 10, "return_scores": True})
                r.raise_for_status()
            out[f"qps_{batch}"] = len(qs) / (time.perf_counter() - started)
    out["after_anon"], out["after_rss"] = tree_memory(gw.proc.pid)
    return out


def shared_pages(gw: Gateway) -> int:
    """Bytes of a gateway's resident memory shared with other processes (another gateway over its cache among them)."""
    with open(f"/proc/{gw.proc.pid}/smaps_rollup", encoding="ascii") as f:
        fields = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f if line.strip().endswith("kB")}
    return fields.get("Shared_Clean", 0) + fields.get("Shared_Dirty", 0)


def sparse_rows(checkout: Path, n: int, corpus: Path, qs: list[str], two: bool) -> dict[str, float]:
    cache = Path(tempfile.mkdtemp(prefix=f"scale-{n}-"))
    try:
        row = build(checkout, corpus, cache)
        gw = start_gateway(checkout, corpus, cache, "conf/gateways/rag_sparse_only.json")
        try:
            row |= serve(gw, qs, "/retrieve/sparse")
            if two:
                second = start_gateway(checkout, corpus, cache, "conf/gateways/rag_sparse_only.json")
                try:
                    serve(second, qs[:50], "/retrieve/sparse")
                    row["shared"] = shared_pages(second)
                    row["second_rss"] = tree_memory(second.proc.pid)[1]
                finally:
                    second.close()
        finally:
            gw.close()
        return row
    finally:
        subprocess.run(["rm", "-rf", str(cache)], check=False)


def dense_rows(checkout: Path, n: int, corpus: Path, qs: list[str],
               search_r1: Path | None) -> list[tuple[str, int, dict[str, float]]]:
    """The dense gateway over a random flat `index_path`, and Search-R1's server over the same files."""
    import faiss

    cache = Path(tempfile.mkdtemp(prefix=f"scale-dense-{n}-"))
    try:
        index = faiss.IndexFlatIP(384)
        rng = np.random.default_rng(0)
        for start in range(0, n, 100_000):
            index.add(rng.standard_normal((min(100_000, n - start), 384), dtype=np.float32))
        faiss.write_index(index, str(cache / "flat.index"))
        del index
        retriever = cache / "retriever.yaml"
        retriever.write_text((ROOT / "conf/retriever/default.yaml").read_text().replace(
            "index_path: null       # an existing", f"index_path: {cache / 'flat.index'}  # an existing"))
        options = ("--retriever-config", str(retriever))
        # A first start exports the encoder to ONNX into this cache (torch and all); the second is a warm start.
        start_gateway(checkout, corpus, cache, "conf/gateways/rag_dense_only.json", *options).close()
        gw = start_gateway(checkout, corpus, cache, "conf/gateways/rag_dense_only.json", *options)
        try:
            rows = [("rollout dense", n, serve(gw, qs, "/retrieve/dense"))]
        finally:
            gw.close()
        if search_r1 is not None:
            rows.append(("Search-R1 dense", n, search_r1_row(search_r1, n, corpus, cache / "flat.index", qs)))
        return rows
    finally:
        subprocess.run(["rm", "-rf", str(cache)], check=False)


SEARCH_R1_SHIM = """
import runpy, sys, torch
# Search-R1's server moves its encoder to CUDA and to float16; this machine has neither: both stay on the CPU.
torch.nn.Module.cuda = lambda self, *a, **k: self
torch.nn.Module.half = lambda self: self
torch.Tensor.cuda = lambda self, *a, **k: self
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def search_r1_row(checkout: Path, n: int, corpus: Path, index: Path, qs: list[str]) -> dict[str, float]:
    """Search-R1's own retrieval server (search_r1/search/retrieval_server.py of a checkout) over the same corpus and
    flat index, its encoder the bundled MiniLM on the CPU: started twice (the first converts the corpus into the Hugging
    Face cache), measured as `serve` measures a gateway. It listens on port 8000, as it always does."""
    from rollout.paths import bundled_model_path

    command = [sys.executable, "-c", SEARCH_R1_SHIM, str(checkout / "search_r1/search/retrieval_server.py"),
               "--index_path", str(index), "--corpus_path", str(corpus), "--retriever_name", "minilm",
               "--retriever_model", bundled_model_path(), "--topk", "10"]
    for attempt in range(2):
        started = time.perf_counter()
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while True:
                if proc.poll() is not None:
                    raise SystemExit(f"Search-R1's server exited with {proc.returncode}")
                try:
                    # Its endpoint fails unless asked for scores (it unpacks (results, scores) either way).
                    if httpx.post("http://127.0.0.1:8000/retrieve", json={"queries": ["x"], "topk": 1,
                                                                           "return_scores": True},
                                  timeout=5).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
            if attempt == 1:
                return serve(Gateway(proc, "http://127.0.0.1:8000", time.perf_counter() - started), qs, "/retrieve")
        finally:
            proc.terminate()
            proc.wait(60)
    raise AssertionError("unreachable")


LUCENE_BUILD = """
import sys
from rollout.retrieval.lucene import build_lucene_index
build_lucene_index(sys.argv[1], sys.argv[2], threads=int(sys.argv[3]))
"""
LUCENE_SEARCH = """
import json, sys, time
import numpy as np
from rollout.retrieval.lucene import LuceneRetriever
qs = json.loads(open(sys.argv[2]).read())
retriever = LuceneRetriever.open(sys.argv[1], lambda ids: np.zeros(len(ids), np.int64), k1=0.9, b=0.4)
retriever.search(qs[:1], 10)
out = {}
for batch in (1, 16):
    started = time.perf_counter()
    for i in range(0, len(qs), batch):
        retriever.search(qs[i:i + batch], 10)
    out[f"qps_{batch}"] = len(qs) / (time.perf_counter() - started)
print(json.dumps(out))
"""


def pyserini_row(n: int, corpus: Path, qs: list[str]) -> dict[str, float]:
    """Pyserini's Lucene index over the same corpus (its BM25, k1=0.9 b=0.4), built and searched as
    `rollout.retrieval.lucene` does: build time and whole-tree peak memory (the JVM included), index size, q/s."""
    folder = Path(tempfile.mkdtemp(prefix=f"scale-lucene-{n}-"))
    try:
        (folder / "input").mkdir()
        (folder / "input" / corpus.name).symlink_to(corpus)
        row = measured_build("the Lucene build", [sys.executable, "-c", LUCENE_BUILD, str(folder / "input"),
                                                  str(folder / "index"), str(os.cpu_count() or 1)],
                             stdout=subprocess.DEVNULL)
        row["index_bytes"] = sum(f.stat().st_size for f in (folder / "index").iterdir())
        (folder / "queries.json").write_text(json.dumps(qs))
        done = subprocess.run([sys.executable, "-c", LUCENE_SEARCH, str(folder / "index"), str(folder / "queries.json")],
                              capture_output=True, text=True, check=True)
        return row | json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        subprocess.run(["rm", "-rf", str(folder)], check=False)


def fmt(row: dict[str, float], key: str) -> str:
    if key not in row:
        return "-"
    value = row[key]
    if key in ("build_anon", "build_rss", "ready_anon", "ready_rss", "after_anon", "after_rss", "shared",
               "second_rss", "index_bytes"):
        return f"{value / GIB:.2f} GiB" if value >= GIB else f"{value / MIB:.0f} MiB"
    if key.startswith("qps"):
        return f"{value:,.0f}"
    return f"{value:.1f}"


COLUMNS = [("build_s", "build s"), ("build_cpu_s", "build CPU s"), ("build_anon", "build peak anon"),
           ("build_rss", "build peak RSS"), ("index_bytes", "index"), ("ready_s", "gw ready s"),
           ("ready_rss", "gw RSS ready"), ("ready_anon", "gw anon ready"), ("after_rss", "gw RSS +queries"),
           ("after_anon", "gw anon +queries"),
           ("qps_1", "q/s b1"), ("qps_16", "q/s b16"), ("shared", "2nd gw shared"), ("second_rss", "2nd gw RSS")]


def sizes_arg(text: str) -> list[int]:
    return [int(s.replace("_", "")) for s in text.split(",") if s]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=sizes_arg, default=[100_000, 1_000_000, 2_000_000])
    p.add_argument("--baseline", type=Path, help="a clone of an older commit, measured the same way")
    p.add_argument("--baseline-max", type=int, default=1_000_000)
    p.add_argument("--dense", type=int, default=0, help="also a dense gateway with a flat index_path over this size")
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--pyserini", type=int, default=0, help="also build and search a Pyserini Lucene index over this size")
    p.add_argument("--search-r1", type=Path, help="a Search-R1 checkout: its retrieval server beside the dense gateway")
    p.add_argument("--bcp", type=int, default=0,
                   help="also build BM25 over this many BrowseComp-Plus-sized documents (~3,000 words each)")
    p.add_argument("--corpora", type=Path, default=Path.home() / ".cache" / "rollout-bench" / "corpora")
    p.add_argument("--smoke", action="store_true", help="2,000 passages, 50 queries: that the bench runs")
    args = p.parse_args(argv)
    if args.smoke:
        args.sizes, args.queries, args.baseline_max = [2000], 50, 2000
        args.dense = 2000 if args.dense else 0
        args.bcp = 100
    rows: list[tuple[str, int, dict[str, float]]] = []
    for n in args.sizes:
        corpus = corpus_file(n, args.corpora)
        qs = queries(corpus, args.queries)
        rows.append(("rollout", n, sparse_rows(ROOT, n, corpus, qs, two=True)))
        print(f"measured {n:,} passages", file=sys.stderr, flush=True)
        if args.baseline is not None and n <= args.baseline_max:
            rows.append(("baseline", n, sparse_rows(args.baseline, n, corpus, qs, two=False)))
    if args.pyserini:
        corpus = corpus_file(args.pyserini, args.corpora)
        rows.append(("Pyserini Lucene", args.pyserini, pyserini_row(args.pyserini, corpus,
                                                                    queries(corpus, args.queries))))
    if args.dense:
        corpus = corpus_file(args.dense, args.corpora)
        rows += dense_rows(ROOT, args.dense, corpus, queries(corpus, args.queries), args.search_r1)
    if args.bcp:
        rows.append(("BrowseComp-Plus-sized", args.bcp, bcp_row(args.bcp, args.corpora)))
    print(" | ".join(["checkout", "passages", *(title for _, title in COLUMNS)]))
    for name, n, row in rows:
        print(" | ".join([name, f"{n:,}", *(fmt(row, key) for key, _ in COLUMNS)]))
    ours = [(n, row) for name, n, row in rows if name == "rollout"]
    for (n0, r0), (n1, r1) in zip(ours, ours[1:]):
        growth = ", ".join(f"{title} x{r1[key] / r0[key]:.2f}" for key, title in COLUMNS[:10]
                           if r0.get(key))
        print(f"growth {n0:,} -> {n1:,} passages: {growth}")
    for name, n, row in rows:
        if name == "baseline":
            new = next(r for m, k, r in rows if m == "rollout" and k == n)
            print(f"at {n:,} passages, baseline / rollout: " + ", ".join(
                f"{title} {row[key] / new[key]:.2f}" for key, title in COLUMNS if row.get(key) and new.get(key)))
    for name, n, row in rows:
        if name == "BrowseComp-Plus-sized":
            from rollout.retrieval.params import SparseParams

            budget = SparseParams().build_memory_mb
            print(f"BrowseComp-Plus-sized BM25 build over {n:,} documents of ~3,000 words: peak anon "
                  f"{fmt(row, 'build_anon')}, peak RSS {fmt(row, 'build_rss')}, {row['build_s']:.1f} s "
                  f"(budget retriever.sparse.build_memory_mb={budget}; target <= 3 GiB "
                  f"{'met' if row['build_anon'] <= 3 * GIB else 'NOT met'})")
    two_m = dict(ours).get(2_000_000)
    if two_m is not None:
        one_m = dict(ours).get(1_000_000)
        growth = two_m["build_anon"] / one_m["build_anon"] - 1 if one_m else None
        print(f"target 2M build peak anon <= 3 GiB: {fmt(two_m, 'build_anon')} "
              f"({'met' if two_m['build_anon'] <= 3 * GIB else 'NOT met'})"
              + (f"; growth 1M -> 2M {growth:+.0%} ({'met' if growth <= 0.25 else 'NOT met'}, <= +25%)"
                 if growth is not None else ""))
        print(f"target 2M gateway ready <= 10 s: {two_m['ready_s']:.1f} s "
              f"({'met' if two_m['ready_s'] <= 10 else 'NOT met'}); resident <= 700 MiB before queries: "
              f"{fmt(two_m, 'ready_rss')} ({'met' if two_m['ready_rss'] <= 700 * MIB else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
