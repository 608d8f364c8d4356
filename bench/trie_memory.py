"""Memory of best-of-N over a long shared prefix: the session trie versus a naive copy-per-chain store.

    .venv/bin/python bench/trie_memory.py [--prefix 32768] [--n 16] [--sample 128]

Scenarios, each over a ``--prefix``-token shared context and ``--n`` samples of ``--sample`` generated tokens (with
logprobs as SGLang reports them -- float32 values, which the proxy stores as float32 because that is lossless for
them -- and weight versions):

- ``first turn``: N generations of the same prompt, prepared together and committed in turn (no checkpoint exists
  yet: the session shares the prompt's encoded ids between the siblings);
- ``after a checkpoint``: one generation commits the long prefix, then N samples extend its checkpoint with a short
  user turn (TITO: the siblings share the checkpoint).

Each is measured three ways, in the same run: the real session core (``proxy.trajectory.session.Session``)
with one sample (*single chain*, the baseline) and with N samples (*trie*), and a naive store that keeps a full
copy of the token state (ids, loss mask, logprobs, versions) per checkpoint, as a per-node snapshot design does
(*naive*). Memory is what ``tracemalloc`` sees retained after the operations (the request messages, which belong to
the client, are allocated before tracing starts). Figures are printed as ratios against the single chain of the
same scenario. Target (issue 4): trie <= 1.3x for best-of-16 over 32k tokens; naive is about 16x.

The token payload of a sample is ``sample x 8`` bytes (4 for the id, 4 for the logprob) against ``prefix x 4`` for
the shared prompt, so the ratio grows with the sample length: the ``--sweep`` table shows where it crosses 1.3x.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tracemalloc
from array import array
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proxy.tokenization import TitoFragment  # noqa: E402
from proxy.trajectory.encode_plan import tokenize_plan  # noqa: E402
from proxy.trajectory.message_keys import message_key, reasoning_variant  # noqa: E402
from proxy.trajectory.session import Session  # noqa: E402
from proxy.trajectory.session_config import SessionConfig  # noqa: E402

EOT = 1


class PrefixTokenizer:
    """A fake TITO tokenizer: any full encode is ``prefix`` tokens, any fragment 24 tokens."""

    end_of_turn_id = EOT

    def __init__(self, prefix: int) -> None:
        self.prefix = prefix

    def encode_full(self, messages: Any, tools: Any = None, kwargs: Any = None) -> list[int]:
        return [1000 + (i % 30000) for i in range(self.prefix)]

    def encode_incremental(self, checkpoint: Any, new: Any, **_: Any) -> TitoFragment:
        return TitoFragment(ids=tuple(range(2000, 2024)), text="")


def generation(session: Session, tokenizer: PrefixTokenizer, messages: list[dict]) -> Any:
    """Prepare and tokenize one generation (the registry's order, without the trio layer)."""
    handle, plan = session.prepare(messages)
    session.set_context(handle, tokenize_plan(tokenizer, plan))
    return handle


def sglang_logprobs(count: int, seed: int) -> list[float]:
    """Varied logprobs as SGLang returns them: float32 values (computed on the GPU in float32) as Python floats."""
    return array("f", [-((seed * 7919 + k * 104729) % 100000) / 9973.0 for k in range(count)]).tolist()


def commit(session: Session, handle: Any, sample: int, index: int) -> None:
    """Commit ``sample`` generated tokens ending with the end-of-turn token."""
    ids = [3000 + index] * (sample - 1) + [EOT]
    answer = {"role": "assistant", "content": f"sample {index}"}
    span = Session.build_span(handle, ids, sglang_logprobs(sample, index), ["v1"] * sample, ())
    session.commit(handle, span, finish_reason="stop", assistant_message=answer, key=message_key(answer),
                   variant=reasoning_variant(answer), logprobs_invalid=False)


def run_trie(scenario: str, prefix: int, n: int, sample: int, messages: dict[str, list[dict]]) -> Session:
    """The session core doing the scenario with ``n`` samples."""
    tokenizer = PrefixTokenizer(prefix)
    session = Session("bench", SessionConfig(max_steps_per_session=None), EOT)
    if scenario == "first turn":
        handles = [generation(session, tokenizer, messages["prompt"]) for _ in range(n)]
        for index, handle in enumerate(handles):
            commit(session, handle, sample, index)
    else:
        first = generation(session, tokenizer, messages["prompt"])
        commit(session, first, 1, -1)
        handles = [generation(session, tokenizer, messages["follow"]) for _ in range(n)]
        for index, handle in enumerate(handles):
            commit(session, handle, sample, index)
    return session


def run_naive(scenario: str, prefix: int, n: int, sample: int) -> list[tuple]:
    """A store that keeps, per checkpoint, a full copy of its token state in the same compact form the session
    uses (ids ``array('i')``, mask bytes, ``array('f')`` logprobs of the generated tokens, run-length versions):
    what a per-node snapshot of the whole token path costs."""
    ids, mask, logprobs, runs = array("i", [1000 + (i % 30000) for i in range(prefix)]), bytes(prefix), array("f"), ()
    store = []
    if scenario == "after a checkpoint":
        ids.append(EOT)
        mask += b"\x01"
        logprobs.append(-0.5)
        runs = (("v1", 1),)
        store.append((array("i", ids), bytes(mask), array("f", logprobs), runs))
        ids.extend(range(2000, 2024))
        mask += bytes(24)
    for index in range(n):
        copy_ids = array("i", ids)
        copy_ids.extend([3000 + index] * (sample - 1) + [EOT])
        copy_logprobs = array("f", logprobs)
        copy_logprobs.extend([-0.5] * sample)
        store.append((copy_ids, mask + b"\x01" * sample, copy_logprobs, runs + (("v1", sample),)))
    return store


def measure(build: Any) -> int:
    """Bytes retained by what ``build()`` returns."""
    gc.collect()
    tracemalloc.start()
    try:
        kept = build()
        gc.collect()
        current, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del kept
    return current


def scenario_ratios(scenario: str, prefix: int, n: int, sample: int) -> tuple[int, float, float, float]:
    """(single-chain bytes, trie ratio, naive ratio, naive single-chain ratio) for one scenario."""
    messages = {"prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "x" * 64}]}
    messages["follow"] = messages["prompt"] + [{"role": "assistant", "content": "sample -1"},
                                               {"role": "user", "content": "again"}]
    # Warm up once: first-use allocations (interned strings, caches) must not count against the single chain.
    run_trie(scenario, prefix, 2, sample, messages)
    single = measure(lambda: run_trie(scenario, prefix, 1, sample, messages))
    trie = measure(lambda: run_trie(scenario, prefix, n, sample, messages))
    naive = measure(lambda: run_naive(scenario, prefix, n, sample))
    naive_single = measure(lambda: run_naive(scenario, prefix, 1, sample))
    return single, trie / single, naive / single, naive_single / single


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", type=int, default=32_768, help="shared prefix tokens (default 32768)")
    parser.add_argument("--n", type=int, default=16, help="samples (default 16)")
    parser.add_argument("--sample", type=int, default=128, help="generated tokens per sample (default 128)")
    parser.add_argument("--sweep", action="store_true", help="also sweep the sample length 32..1024")
    args = parser.parse_args(argv)
    print(f"best-of-{args.n} over a {args.prefix}-token prefix, {args.sample} generated tokens per sample")
    print(f"{'scenario':<20} {'single chain':>13} {'trie':>7} {'naive':>7}   (ratios to the single chain)")
    for scenario in ("first turn", "after a checkpoint"):
        single, trie, naive, naive_single = scenario_ratios(scenario, args.prefix, args.n, args.sample)
        print(f"{scenario:<20} {single / 1024:>10.0f} KiB {trie:>6.2f}x {naive:>6.2f}x"
              f"   (naive single chain: {naive_single:.2f}x)")
    if args.sweep:
        print("\nsweep: trie ratio by sample length (first turn / after a checkpoint)")
        for sample in (32, 64, 128, 256, 512, 1024):
            first = scenario_ratios("first turn", args.prefix, args.n, sample)
            after = scenario_ratios("after a checkpoint", args.prefix, args.n, sample)
            print(f"  {sample:>5} tokens: trie {first[1]:.2f}x / {after[1]:.2f}x, "
                  f"naive {first[2]:.2f}x / {after[2]:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
