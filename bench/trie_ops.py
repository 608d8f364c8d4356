"""Cost of prepare and commit over a long session: the session trie versus a naive copy-per-step store.

    .venv/bin/python bench/trie_ops.py [--turns 200] [--fragment 40] [--generated 200] [--repeat 3]

One agent session of ``--turns`` steps (each: a tool result of ``--fragment`` tokens appended by TITO, an answer of
``--generated`` tokens), driven through the real session core (``proxy.trajectory.session.Session``) in the
registry's order. Each request is a fresh copy of the whole message history (as a server parses it from JSON), so
the trie walk hashes every message of the request, as it will in production. Timed per turn, best of
``--repeat`` runs:

- ``request keys``: canonical keys of the request's messages, O(request text), computed before the lock;
- ``prepare``: the critical section (admit, walk, attach, nearest checkpoint, chain decision) plus recording the
  context tokens; ``commit``: building the step's span plus the critical section (chain, upsert, checkpoint);
- ``input_ids``: materializing the prompt for the upstream request (O(prompt), outside any lock, reported apart);
- the baseline: a naive store that deep-copies the checkpoint's whole token state into each generation at prepare
  and stores a full copy at commit (a per-node snapshot design), measured in the same run.

Printed: mean microseconds per turn over the first and the last 20 turns, and their ratio (flat means the cost does
not grow with the session's token count), and the naive store's cost relative to the trie's for the last turns.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
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


class FragmentTokenizer:
    """A fake TITO tokenizer: a full encode is 500 tokens, a fragment ``fragment`` tokens."""

    end_of_turn_id = EOT

    def __init__(self, fragment: int) -> None:
        self.fragment = fragment

    def encode_full(self, messages: Any, tools: Any = None, kwargs: Any = None) -> list[int]:
        return list(range(1000, 1500))

    def encode_incremental(self, checkpoint: Any, new: Any, **_: Any) -> TitoFragment:
        return TitoFragment(ids=tuple(range(2000, 2000 + self.fragment)), text="")


def history(turns: int) -> list[list[dict]]:
    """The request of every turn: system, task, then (answer, tool result) pairs; contents of ~200 characters."""
    messages = [{"role": "system", "content": "You are an agent. " * 10}, {"role": "user", "content": "Task. " * 30}]
    requests = []
    for turn in range(turns):
        requests.append(list(messages))
        messages.append({"role": "assistant", "content": f"Step {turn}: " + "reasoning " * 20,
                         "tool_calls": [{"id": f"call_{turn}", "type": "function",
                                         "function": {"name": "run", "arguments": json.dumps({"cmd": f"ls {turn}"})}}]})
        messages.append({"role": "tool", "tool_call_id": f"call_{turn}", "content": f"output {turn} " * 25})
    return requests


def run_trie(requests: list[list[dict]], fragment: int, generated: int) -> list[tuple[float, ...]]:
    """Per turn: (prepare critical section + context, commit, input_ids, request keys) in seconds."""
    tokenizer = FragmentTokenizer(fragment)
    session = Session("bench", SessionConfig(max_steps_per_session=None), EOT)
    timings = []
    for turn, raw in enumerate(requests):
        request = json.loads(json.dumps(raw))  # fresh objects, as parsed from a request body (not timed)
        answer = request and json.loads(json.dumps(requests[turn + 1][-2])) if turn + 1 < len(requests) else {
            "role": "assistant", "content": "done"}
        ids = [3000 + turn] * (generated - 1) + [EOT]
        started = time.perf_counter()
        keys = session.request_keys(request)
        locked = time.perf_counter()
        handle, plan = session.prepare(request, request_keys=keys)
        tokens = session.set_context(handle, tokenize_plan(tokenizer, plan))
        prepared = time.perf_counter()
        prompt = tokens.input_ids()
        materialized = time.perf_counter()
        span = Session.build_span(handle, ids, [-0.5] * generated, ["v1"] * generated, ())
        session.commit(handle, span, finish_reason="stop", assistant_message=answer, key=message_key(answer),
                       variant=reasoning_variant(answer), logprobs_invalid=False)
        committed = time.perf_counter()
        assert len(prompt) == tokens.prompt_length
        timings.append((prepared - locked, committed - materialized, materialized - prepared, locked - started))
    return timings


def run_naive(requests: list[list[dict]], fragment: int, generated: int) -> list[tuple[float, float]]:
    """Per turn: (prepare seconds, commit seconds) of a store that copies the whole token state at both. Its prepare
    matches messages too (the same keys; it needs them as much as the trie), timed apart like the trie's."""
    snapshot: tuple[array, bytearray, array] | None = None
    timings = []
    for turn, raw in enumerate(requests):
        request = json.loads(json.dumps(raw))
        ids = [3000 + turn] * (generated - 1) + [EOT]
        [message_key(message) for message in request]
        started = time.perf_counter()
        if snapshot is None:
            working = (array("i", range(1000, 1500)), bytearray(500), array("d", [0.0] * 500))
        else:
            # Deep-copy the matched checkpoint into the generation's working state, then append the fragment.
            working = (array("i", snapshot[0]), bytearray(snapshot[1]), array("d", snapshot[2]))
            working[0].extend(range(2000, 2000 + fragment))
            working[1].extend(bytes(fragment))
            working[2].extend([0.0] * fragment)
        prepared = time.perf_counter()
        working[0].extend(ids)
        working[1].extend(b"\x01" * generated)
        working[2].extend([-0.5] * generated)
        # Store the checkpoint: a full copy per node.
        snapshot = (array("i", working[0]), bytearray(working[1]), array("d", working[2]))
        committed = time.perf_counter()
        timings.append((prepared - started, committed - prepared))
    return timings


def best_of(runs: list[list[tuple]]) -> list[tuple]:
    """Per turn, the fastest of the runs (each column separately)."""
    return [tuple(min(column) for column in zip(*per_turn)) for per_turn in zip(*runs)]


def mean_us(rows: list[tuple], column: int) -> float:
    return 1e6 * sum(row[column] for row in rows) / len(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--fragment", type=int, default=40, help="context tokens added per turn (default 40)")
    parser.add_argument("--generated", type=int, default=200, help="generated tokens per turn (default 200)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    requests = history(args.turns)
    trie = best_of([run_trie(requests, args.fragment, args.generated) for _ in range(args.repeat)])
    naive = best_of([run_naive(requests, args.fragment, args.generated) for _ in range(args.repeat)])
    window = min(20, args.turns // 2)
    first, last = slice(0, window), slice(args.turns - window, args.turns)
    tokens = 500 + args.turns * (args.fragment + args.generated)
    messages = len(requests[-1])
    print(f"{args.turns}-turn session: {messages} messages and ~{tokens} tokens at the last turn "
          f"(+{args.fragment} context, +{args.generated} generated per turn)")
    print(f"{'per turn (us)':<28} {'first ' + str(window):>10} {'last ' + str(window):>10} {'growth':>8}")
    rows = [("request keys (outside lock)", trie, 3), ("trie prepare (locked)", trie, 0), ("trie commit", trie, 1),
            ("trie input_ids (outside lock)", trie, 2), ("naive prepare (copy)", naive, 0),
            ("naive commit (copy)", naive, 1)]
    for name, data, column in rows:
        early, late = mean_us(data[first], column), mean_us(data[last], column)
        print(f"{name:<28} {early:>10.1f} {late:>10.1f} {late / early:>7.2f}x")
    trie_late = mean_us(trie[last], 0) + mean_us(trie[last], 1)
    naive_late = mean_us(naive[last], 0) + mean_us(naive[last], 1)
    print(f"last {window} turns, prepare + commit: naive / trie = {naive_late / trie_late:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
