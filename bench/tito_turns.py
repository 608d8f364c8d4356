"""TITO per-turn cost per model family: the incremental encode of one agent step (checkpoint + the new tool result)
against a full official re-render and encode of the whole conversation, at turn 10 and turn 100 (issue 17, Bench).

The conversation is an agent tool loop under one user query: every turn an assistant message with reasoning, a
short text and one tool call, then the tool's result (a few hundred characters). At turn k the proxy's work for the
new step is ``encode_incremental(checkpoint, [tool result])``; the alternative is ``encode_full`` of all messages.
Median of ``--repeat`` runs of each, same process, tokenizers loaded and warmed first::

    .venv/bin/python bench/tito_turns.py [--families glm4_7,glm5_1,glm5_2] [--turns 10,100] [--repeat 15]
    .venv/bin/python bench/tito_turns.py --families deepseek_v3_1,deepseek_v3_2,deepseek_v4

Tokenizer folders: ``--root DIR`` holding one folder per family name, else the project's fetcher
(``dressage-tokenizers``) folders.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from proxy.families import get_family, load_tito_tokenizer
from serving.tokenizer_files import ensure_tokenizers

TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "Read a file",
                                            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]


def conversation(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                      {"role": "user", "content": "Find where the retry limit is configured."}]
    for turn in range(turns):
        messages.append({
            "role": "assistant", "content": f"Reading file {turn}.",
            "reasoning_content": f"Step {turn}: the limit may be in module {turn}; read it next.",
            "tool_calls": [{"id": f"c{turn}", "type": "function",
                            "function": {"name": "read_file", "arguments": {"path": f"src/module_{turn}.py"}}}],
        })
        messages.append({"role": "tool", "tool_call_id": f"c{turn}",
                         "content": f"# module {turn}\n" + "def handler(x):\n    return x * 2\n" * 8})
    return messages


def median_ms(function: Any, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def measure(family: str, path: Path, turns: int, repeat: int) -> tuple[float, float]:
    tito = load_tito_tokenizer(family, path)
    messages = conversation(turns)
    history, new = messages[:-1], messages[-1:]
    # the checkpoint: the full render up to the last assistant turn, plus what the model generated for it
    prompt = tito.encode_full(history[:-1], TOOLS)
    checkpoint = prompt + tito.encode_text(tito.render_assistant_after(history[:-1], history[-1]))
    result = tito.encode_incremental(checkpoint, new, prior_messages=history, tools=TOOLS)
    assert result.ok, result
    incremental = median_ms(lambda: tito.encode_incremental(checkpoint, new, prior_messages=history, tools=TOOLS),
                            repeat)
    full = median_ms(lambda: tito.encode_full(messages, TOOLS), repeat)
    return incremental, full


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--families", default="glm4_7,glm5_1,glm5_2")
    parser.add_argument("--turns", default="10,100")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--root", type=Path, default=None)
    args = parser.parse_args()
    root = args.root
    print("| family | turn | incremental (ms) | full re-render (ms) | full / incremental |")
    print("|---|---:|---:|---:|---:|")
    for family in args.families.split(","):
        path = root / family if root else ensure_tokenizers() / str(get_family(family).tokenizer_folder)
        for turns in (int(t) for t in args.turns.split(",")):
            incremental, full = measure(family, path, turns, args.repeat)
            print(f"| {family} | {turns} | {incremental:.2f} | {full:.2f} | {full / incremental:.1f}x |")


if __name__ == "__main__":
    main()
