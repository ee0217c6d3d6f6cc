"""What a tool call's accounting costs the gateway: counting the result text's tokens, beside the call's own work.

Every tools/call answer is stamped with the tokens its text puts into the model's context
(`rollout.gateway.metering`). This prints, per tool, the CPU time of that count next to the tool's
own work as the gateway does it in-process (the search or read, and the result's serialization to
the text a client receives), interleaved over the same queries in one run:

    python bench/metering.py --queries 300 --rounds 5

It leaves out the MCP protocol around a call (JSON-RPC, HTTP), which `bench/gateway_load.py` measures;
so the ratio here is an upper bound of metering's share of a whole call's CPU. The default tokenizer
counts word by word with a cache of each word's count (`rollout.llm.token_count`): "first
round" is the count while that cache fills (one process, all three tools in turn), the median the
count once a run's words recur.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

from rollout.data import ensure_demo_kb, load_corpus, load_questions
from rollout.gateway.knowledge import KnowledgeBase
from rollout.paths import default_cache_dir
from rollout.retrieval import load_or_build_indexes
from rollout.wire import structured_text


def _cpu_us(fn: Callable[[str], str], queries: list[str]) -> tuple[float, list[str]]:
    texts = []
    t0 = time.process_time()
    for q in queries:
        texts.append(fn(q))
    return (time.process_time() - t0) / len(queries) * 1e6, texts


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    kb_files = ensure_demo_kb(default_cache_dir(), n_passages=2000, n_questions=200, seed=0)
    passages = load_corpus(kb_files.corpus_path)
    questions = [q.question for q in load_questions(kb_files.questions_path)]
    queries = (questions * (args.queries // len(questions) + 1))[: args.queries]
    kb = KnowledgeBase(passages, load_or_build_indexes(passages, default_cache_dir(), which=["sparse"]))
    counter = kb.token_counter()
    docs = {q: [h.doc_id for h in kb.search_documents(q, 5).results] or [passages[0].id] for q in queries}
    tools: dict[str, Callable[[str], str]] = {
        "query_knowledge_base_sparse (top 5)": lambda q: structured_text(kb.search("sparse", q, 5).model_dump()),
        "search_documents (10 docs)": lambda q: structured_text(kb.search_documents(q).model_dump()),
        "recall_documents (5 docs, 2000 tokens)": lambda q: kb.recall_documents(q, 2000, docs[q]).render(),
    }
    print(f"load average {os.getloadavg()[0]:.1f}; {args.queries} demo queries x {args.rounds} rounds, "
          "median of rounds, CPU time per call")
    print(f"| {'tool':40} | tool work µs | counting µs | counting / work | first round µs | result tokens |")
    print(f"|{'-' * 42}|--------------|-------------|-----------------|----------------|---------------|")
    for name, tool in tools.items():
        work, count, tokens = [], [], 0
        for _ in range(args.rounds):  # interleaved: the tool, then the count of its own results
            work_us, texts = _cpu_us(tool, queries)
            count_us, _ = _cpu_us(counter.count, texts)
            work.append(work_us)
            count.append(count_us)
            tokens = int(statistics.mean(counter.count(t) for t in texts))
        w, c = statistics.median(work), statistics.median(count)
        print(f"| {name:40} | {w:12.0f} | {c:11.0f} | {c / w:15.2f} | {count[0]:14.0f} | {tokens:13d} |")


if __name__ == "__main__":
    main()
