"""What a live session costs in memory, counted in-process (issue 21 item 5): per session and per stored token.

The proxy's RSS growth (``bench/turn_growth.py``, ``bench/floor_sessions.py``) measures the allocator as much as the
sessions: every turn allocates and frees a request body and a reply of the whole history, and the arrays stored later
reuse those pages without growing the RSS (docs/benchmarks.md, "Bytes per stored token: not measured"). This bench
counts what the session registry keeps instead: ``tracemalloc``'s traced bytes after the sessions were built, less
those before, with the real Qwen3 tokenizer, the registry the proxy runs (prepare, TITO, commit) and its default
store (sqlite, on disk: the journal is not in memory). No HTTP, no upstream: the answers are the tokenizer's own
rendering of scripted replies, with one logprob and one weight version per generated token, as SGLang reports them.

Phases:

- ``sessions``: ``--sessions`` live 10-turn sessions of short turns (the issue's ~394 tokens each): the fixed cost;
- ``tokens``: ``--token-sessions`` live sessions grown to ``--tokens`` tokens each, half of them generated
  (~300-token user turns, ~300-token answers): bytes per stored token, whatever a turn adds besides its tokens
  included;
- ``cut`` (not in the default ``--phases``): the same sessions with every answer cut short of its end (as by
  ``max_tokens``), so that every turn after the first starts a new segment with a full encode of the conversation
  (spec 5.4; ``proxy/trajectory/prefix_share.py`` keeps such an encode from storing the path again).

    .venv/bin/python bench/session_memory.py [--sessions 2000] [--token-sessions 20] [--tokens 20000] [--rss]
        [--tools N] [--reasoning]

``--reasoning``: every answer carries a reasoning as long as its content, as a thinking model's do (the trie holds
a long one packed). ``--tools N``: every request of every session sends the same N tool schemas, each request its
own parsed copy, as an agent rollout does (the sessions share them: ``node_contents.py:context_contents``).

``--rss`` reads the process's RSS growth over the same sessions instead (no tracemalloc, which costs memory of its
own; a collection and glibc's ``malloc_trim`` before each reading): what the allocator adds to what the sessions
hold (pymalloc rounds each block up to 16 bytes and keeps partly used pools), without the request path's churn.
"""

from __future__ import annotations

import argparse
from array import array
import gc
import json
import sys
import tempfile
import time
import os
import tracemalloc
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from floor_sessions import rss_bytes  # noqa: E402
from real_text import real_text  # noqa: E402
from proxy.controllers.malloc_trim import find_malloc_trim  # noqa: E402
from proxy.controllers.session_registry import SessionRegistry  # noqa: E402
from proxy.families import load_tito_tokenizer  # noqa: E402
from proxy.trajectory.session_config import SessionConfig  # noqa: E402
from proxy.trajectory.stores import open_store  # noqa: E402
from serving.tokenizer_files import model_tokenizer_path  # noqa: E402

SYSTEM = {"role": "system", "content": "You are a careful assistant. Answer briefly."}
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima")


def word_text(words: int, salt: int) -> str:
    """``words`` distinct-looking words (about one token each): compresses ~30x, unlike real text."""
    return " ".join(f"{WORDS[(salt + i) % len(WORDS)]}{(salt * 7 + i) % 97}" for i in range(words))


#: how the turns' text is made (``--text``), as many tokens as ``words`` of the word list (~3.5 tokens a word): slices
#: of real source text (the default), or the old word list
TEXTS = {"source": lambda words, salt: real_text(round(words * 3.5), salt), "words": word_text}
text = TEXTS["source"]


def tool_schemas(count: int) -> list[dict[str, Any]]:
    """``count`` function tools of an agent's usual shape (a description and a few typed parameters each)."""
    return [{"type": "function", "function": {
        "name": f"tool_{i}", "description": f"Tool {i}: {real_text(60, 5_000 + i)}",
        "parameters": {"type": "object", "required": ["path"], "properties": {
            "path": {"type": "string", "description": "The file to act on, relative to the workspace."},
            "limit": {"type": "integer", "description": "At most this many lines.", "minimum": 1},
            "recursive": {"type": "boolean", "description": "Descend into folders."}}}}} for i in range(count)]


#: the tools every request of every session sends (``--tools``): none by default
TOOLS: list[dict[str, Any]] = []
#: answers carry a reasoning as long as their content, as a thinking model's do (``--reasoning``)
REASONING = False


async def grow(registry: SessionRegistry, session_id: str, turns: int, user_words: int, answer_words: int,
               cut: bool = False) -> int:
    """One session of ``turns`` answered turns; the tokens it stores (its last context plus its last answer). With
    ``cut``, every answer stops short of its end (``max_tokens``): each next turn is a full encode (spec 5.4).
    Each request carries its own parsed copy of :data:`TOOLS`, as a server parses each request body anew."""
    tokenizer = registry.tokenizer
    messages: list[dict[str, Any]] = [SYSTEM]
    stored = 0
    sent_tools = json.dumps(TOOLS)
    for turn in range(turns):
        messages.append({"role": "user", "content": text(user_words, turn)})
        prepared = await registry.prepare(session_id, list(messages), tools=json.loads(sent_tools) or None)
        answer = {"role": "assistant", "content": text(answer_words, turn + 1000)}
        if REASONING:
            answer = {"role": "assistant", "reasoning_content": text(answer_words, turn + 2000), **answer}
        ids = tokenizer.encode_text(tokenizer.render_assistant(answer, None))
        finish = "stop"
        if cut:
            ids, finish = ids[: len(ids) * 9 // 10], "length"
            answer = {"role": "assistant", "content": tokenizer.decode(ids)}
        # float32 values, as SGLang's logprobs are (torch float32 ``.tolist()``): stored as 4-byte floats.
        logprobs = array("f", [-0.25 - (i % 13) / 100 for i in range(len(ids))]).tolist()
        await registry.commit(prepared.handle, ids, logprobs, ["v0"] * len(ids), None, finish, answer)
        messages.append(answer)
        stored = len(prepared.input_ids()) + len(ids)
    return stored


def _rss_bytes() -> int:
    """This process's RSS after a collection and a ``malloc_trim`` (freed memory is not counted)."""
    gc.collect()
    trim = find_malloc_trim()
    if trim is not None:
        trim(0)
    return rss_bytes(os.getpid())


async def measure(tokenizer: Any, count: int, turns: int, user_words: int, answer_words: int,
                  top: int = 0, rss: bool = False, cut: bool = False) -> dict[str, float]:
    """Traced bytes the registry keeps for ``count`` live sessions (built after a warm-up session and a baseline),
    or with ``rss`` the process's RSS growth; with ``top``, the allocation sites that grew most are printed (per
    session)."""
    with tempfile.TemporaryDirectory() as tmp:
        async with open_store(f"sqlite:///{tmp}/store.sqlite") as store:
            registry = SessionRegistry(tokenizer, store=store, config=SessionConfig(max_steps_per_session=None))
            await grow(registry, "warm-up", turns, user_words, answer_words, cut)  # caches, interned strings, pages
            gc.collect()
            if rss:
                before = _rss_bytes()
            else:
                tracemalloc.start(int(os.environ.get("TRACE_FRAMES", "1")))
                before = tracemalloc.get_traced_memory()[0]
            first = tracemalloc.take_snapshot() if top and not rss else None
            began = time.perf_counter()
            tokens = 0
            for index in range(count):
                tokens += await grow(registry, f"s{index}", turns, user_words, answer_words, cut)
            gc.collect()
            after = _rss_bytes() if rss else tracemalloc.get_traced_memory()[0]
            if first is not None:
                if os.environ.get("TRACE_FRAMES"):  # where one site's blocks come from, ``TRACE_FRAMES`` deep
                    for stat in tracemalloc.take_snapshot().compare_to(first, "traceback")[:top]:
                        print(f"  {stat.size_diff / count:>9.0f} B/session  {stat.count_diff / count:>6.1f} blocks")
                        print("\n".join(f"      {line}" for line in stat.traceback.format()[-8:]))
                for stat in tracemalloc.take_snapshot().compare_to(first, "lineno")[:top]:
                    frame = stat.traceback[0]
                    name = frame.filename.removeprefix(f"{ROOT}/")
                    print(f"  {stat.size_diff / count:>9.0f} B/session  {stat.count_diff / count:>6.1f} blocks  "
                          f"{name}:{frame.lineno}")
            if not rss:
                tracemalloc.stop()
            elapsed = time.perf_counter() - began
    grown = after - before
    return {"sessions": count, "tokens_each": tokens / count, "bytes": grown, "per_session": grown / count,
            "per_token": grown / tokens, "seconds": elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phases", default="sessions,tokens")
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--token-sessions", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=20_000, help="tokens each long session grows to (about)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--text", choices=sorted(TEXTS), default="source",
                        help="the turns' text: slices of real source (default) or the old word list, which "
                             "compresses ~30x (bench/real_text.py)")
    parser.add_argument("--tools", type=int, default=0,
                        help="every request of every session sends these many tool schemas (an agent rollout)")
    parser.add_argument("--reasoning", action="store_true",
                        help="answers carry a reasoning (reasoning_content) as long as their content")
    parser.add_argument("--rss", action="store_true", help="RSS growth instead of traced bytes (module docstring)")
    parser.add_argument("--top", type=int, default=0,
                        help="print the N allocation sites that grew most (with TRACE_FRAMES=N in the environment, "
                             "their tracebacks N frames deep first)")
    args = parser.parse_args()
    global text, REASONING
    text = TEXTS[args.text]
    TOOLS[:] = tool_schemas(args.tools)
    REASONING = args.reasoning
    tokenizer = load_tito_tokenizer("qwen3", model_tokenizer_path("qwen3"))
    results: dict[str, dict[str, float]] = {}
    for phase in args.phases.split(","):
        if phase == "sessions":
            # 10 turns of 4-word questions and 2-word answers: ~400 tokens a session, as the issue's ~394.
            results[phase] = trio.run(measure, tokenizer, args.sessions, 10, 4, 2, args.top, args.rss)
        elif phase in ("tokens", "cut"):
            # ~300-token user turns and ~300-token answers (85 words each), half the stored tokens generated; "cut":
            # every answer stopped short of its end, so every turn after the first is a new segment's full encode.
            turns = max(1, round(args.tokens / 620))
            results[phase] = trio.run(measure, tokenizer, args.token_sessions, turns, 85, 85, args.top, args.rss,
                                      phase == "cut")
        else:
            parser.error(f"unknown phase {phase!r}")
        r = results[phase]
        print(f"{phase}: {r['sessions']} live sessions of {r['tokens_each']:.0f} tokens: "
              f"{r['bytes'] / 2**20:.1f} MiB {'of RSS' if args.rss else 'traced'}, "
              f"{r['per_session'] / 1024:.1f} KiB a session, "
              f"{r['per_token']:.1f} bytes a stored token ({r['seconds']:.0f} s)", flush=True)
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
