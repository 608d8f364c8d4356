"""Per-turn cost of TITO (ours) against renderers' bridge and a full re-render, at turn 10 and turn 100.

An agentic tool loop (system, one user query, then N steps of assistant reasoning + one tool call and its tool
result), with the real Qwen3 / Qwen3.5 tokenizers. At turn T (T assistant turns in the checkpoint) each method
produces the next context:

- ``ours``: ``encode_incremental`` (the fragment for the new tool result; the checkpoint is not touched);
- ``renderers``: renderers 0.1.12's ``bridge_to_next_turn`` (prompt + completion of the last step, new messages);
- ``full``: our ``encode_full`` of the whole request (the official template rendered by transformers' jinja, then
  tokenized), what a proxy without TITO pays every turn;
- ``renderers full``: renderers' ``render_ids`` of the whole request.

Median of ``--repeat`` calls each, microseconds. renderers 0.1.12 is a project dependency since it became
GLM-4.7/GLM-5's back end (docs/families.md).

    .venv/bin/python bench/tito_renderers.py [--turns 10,100] [--repeat 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proxy.families import load_tito_tokenizer  # noqa: E402
from serving.tokenizer_files import ensure_tokenizers, model_tokenizer_path  # noqa: E402
from proxy.tokenization.renderers_backend import TokenizerProtocol  # noqa: E402

TOOLS = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
}}]


def episode(turns: int) -> list[dict]:
    messages = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Fix the bug."}]
    for step in range(turns):
        messages.append({"role": "assistant", "content": "", "reasoning_content": f"Step {step}: read the next file.",
                         "tool_calls": [{"id": f"c{step}", "type": "function",
                                         "function": {"name": "read_file", "arguments": {"path": f"src/m{step}.py"}}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{step}", "content": f"def f{step}():\n    return {step}\n"})
    return messages


def median_us(function, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        function()
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", default="10,100")
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    import renderers

    root = ensure_tokenizers()
    configs = {"qwen3": renderers.Qwen3RendererConfig, "qwen3_5": renderers.Qwen35RendererConfig}
    print("family   turn  ours_us  renderers_us  full_us  renderers_full_us  full/ours  renderers/ours")
    for family, config in configs.items():
        tito = load_tito_tokenizer(family, model_tokenizer_path(family, root))
        renderer = renderers.create_renderer(TokenizerProtocol(tito), config(enable_thinking=True))
        for turns in (int(t) for t in args.turns.split(",")):
            messages = episode(turns)
            history, new = messages[:-1], messages[-1:]  # the checkpoint ends with assistant turn `turns`
            prompt = tito.encode_full(history[:-1], TOOLS, {})
            completion = tito.encode_text(tito.render_assistant(history[-1], {}))
            checkpoint = prompt + completion
            ours = median_us(
                lambda: tito.encode_incremental(checkpoint, new, prior_messages=history, tools=TOOLS), args.repeat
            )
            bridge = median_us(lambda: renderer.bridge_to_next_turn(prompt, completion, new, tools=TOOLS), args.repeat)
            full = median_us(lambda: tito.encode_full(messages, TOOLS, {}), args.repeat)
            rfull = median_us(
                lambda: renderer.render_ids(messages, tools=TOOLS, add_generation_prompt=True), args.repeat
            )
            assert renderer.bridge_to_next_turn(prompt, completion, new, tools=TOOLS) is not None, "bridge refused"
            print(f"{family:8} {turns:4} {ours:8.0f} {bridge:13.0f} {full:8.0f} {rfull:18.0f} {full / ours:10.1f} "
                  f"{bridge / ours:15.1f}")


if __name__ == "__main__":
    main()
