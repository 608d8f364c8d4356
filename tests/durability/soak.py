"""A longer crash soak than the suite's: the kill -9 harness with more kills, over several seeds.

    .venv/bin/python -m tests.durability.soak [--seeds 5] [--kills 10] [--store sqlite|memory]

Runs the never-killed reference once, then one killed run per seed (seeds 1..N), each compared with the reference
(``tests/durability/compare.py``); prints one line per run and exits 1 if any run lost, duplicated or changed
anything (the run's logs are kept and named then). ``--store memory`` shows what the harness reports for a store
that does not survive a crash (everything after the first kill is lost). Not part of ``./dev test``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import trio

from serving.tokenizer_files import model_tokenizer_path
from tests.durability import harness
from tests.durability.compare import compare
from tests.durability.conftest import sqlite_url


async def soak(args: argparse.Namespace) -> int:
    tokenizer = model_tokenizer_path("qwen3")
    root = Path(tempfile.mkdtemp(prefix="crash-soak-"))

    def store(name: str) -> str:
        (root / name).mkdir()
        return sqlite_url(root / name) if args.store == "sqlite" else "memory"

    reference = await harness.run(store("reference"), tokenizer, root / "reference" / "logs")
    print(f"reference: {len(reference.outcome.segments)} segments of {len(reference.outcome.finalized)} sessions, "
          f"{reference.exchanges} exchanges", flush=True)
    failed = 0
    for seed in range(1, args.seeds + 1):
        started = time.monotonic()
        killed = await harness.run(store(f"seed-{seed}"), tokenizer, root / f"seed-{seed}" / "logs", kills=args.kills,
                                   seed=seed)
        comparison = compare(reference.outcome, killed.outcome)
        verdict = "identical" if comparison.identical else "DIFFERENT"
        print(f"seed {seed}: {len(killed.deaths)} kills, {killed.retries} retried requests, "
              f"{killed.replayed} answers replayed from committed steps, {verdict} "
              f"({time.monotonic() - started:.0f} s)", flush=True)
        if not comparison.identical:
            failed += 1
            print(comparison.describe())
            print(f"  logs: {root / f'seed-{seed}' / 'logs'}")
    print(f"{args.seeds - failed}/{args.seeds} runs identical to the reference (files in {root})")
    return 1 if failed else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--store", choices=("sqlite", "memory"), default="sqlite")
    args = parser.parse_args()
    raise SystemExit(trio.run(soak, args))


if __name__ == "__main__":
    main()
