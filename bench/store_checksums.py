"""What checking a corpus store's checksums adds to a start: the sha256 of its id and row arrays, against opening it.

    python bench/store_checksums.py [--passages 2000000] [--repeats 5]

Writes a store of N passages (short texts: the arrays checked do not depend on the text) into a temporary folder,
then times, best of `--repeats`, opening it (`CorpusStore(path)`: meta.json and the Arrow footer) and checking its
arrays (`CorpusStore.damage`), warm in the page cache, as a second start finds them. Prints both, the bytes hashed,
the rate, and the check scaled to wiki-18's 21M passages.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from rollout.data.corpus_store import CorpusStore, write_store
from rollout.records import Passage

WIKI18 = 21_015_324
ARRAYS = ("ids.npy", "rows.npy", "docs.npy", "doc_rows.npy")


def best_of(repeats: int, fn) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="store-checksums-") as tmp:
        path = Path(tmp) / "store"
        write_store((Passage(f"p{i}", "T", f"text {i}", f"d{i // 3}") for i in range(args.passages)), path)
        store = CorpusStore(path)
        assert store.damage() is None
        hashed = sum((path / name).stat().st_size for name in ARRAYS)
        opened = best_of(args.repeats, lambda: CorpusStore(path))
        checked = best_of(args.repeats, store.damage)
    print(f"passages {args.passages:,}: open {opened * 1000:.1f} ms, checksums {checked * 1000:.1f} ms "
          f"({hashed / 1e6:.1f} MB hashed, {hashed / checked / 1e9:.2f} GB/s); "
          f"at {WIKI18:,} passages about {checked * WIKI18 / args.passages:.2f} s")


if __name__ == "__main__":
    main()
