"""The demo: a scripted tool-using agent through the proxy, and the trajectory it recorded.

``python -m proxy.demo [--model FAMILY] [--stream]`` (every family of ``dressage-proxy families`` but ``generic``) (the README's ``./dev demo``):

1. starts the proxy in-process on an ephemeral loopback port, on its embedded engine, with an engine script that
   makes the "model" run the calculator flow of the request-flow example (``shared/seeds/004``): the user asks to
   add 5 and 3, then multiply by 2; the model reasons, calls ``add``, then ``multiply`` (two tool calls in two
   steps, in the model's raw format: Qwen3's JSON ``<tool_call>`` or Qwen3.5's XML one), then answers;
2. drives it as a blackbox agent would, through the **official** ``openai`` SDK (``base_url`` = the proxy,
   ``X-Session-Id`` as a default header), executing the tools locally;
3. finalizes the session and reads its trajectory with :class:`proxy.client.ProxyClient`;
4. prints the agent's transcript, then every segment: its boundary reason, the context spans (loss mask 0) as
   text and the generated spans (loss mask 1) token by token with id, mask, logprob and weight version; then a
   summary.

Everything is deterministic (the engine's seed and script, deterministic tool-call ids): two runs print the same
thing. The engine runs without a token rate limit unless ``--token-rate`` is given (then ``--stream`` shows the
answer arriving as it is generated). The ``openai`` package is a test dependency (``pip install -e '.[test]'``,
which ``./dev demo`` does).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

import attrs
import trio

# transformers without torch prints a warning when it is imported (by the proxy's tokenizer); the demo never needs
# torch, so keep its output clean.
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from engine import EngineConfig  # noqa: E402 (after the environment variable above)
from engine.deepseek_markup import render_dsml_call, render_v31_call  # noqa: E402
from engine.glm_markup import render_glm_call  # noqa: E402
from engine.minimax_markup import render_minimax_call, render_minimax_m3_call  # noqa: E402
from proxy.cli import ProxyHandle, run_proxy  # noqa: E402
from proxy.client import FinalizeResult, ProxyClient, TrajectoryStats  # noqa: E402
from proxy.config import ProxyConfig  # noqa: E402
from proxy.families import get_family, load_tito_tokenizer  # noqa: E402
from serving.tokenizer_files import model_tokenizer_path  # noqa: E402

SESSION_ID = "calculator-demo"
INSTANCE_ID = "calculator-prompt-0"
WEIGHT_VERSION = "demo-v1"
SYSTEM_PROMPT = "You are a helpful calculator assistant with access to calculator tools."
USER_PROMPT = "Please calculate 5 plus 3, and then multiply the result by 2."
#: the agent gives up after this many model calls
MAX_STEPS = 6


def _number_tool(name: str, description: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object",
        "properties": {"a": {"type": "number", "description": "first operand"},
                       "b": {"type": "number", "description": "second operand"}},
        "required": ["a", "b"]}}}


TOOLS = [_number_tool("add", "Add two numbers."), _number_tool("multiply", "Multiply two numbers.")]

_ANSWER = "5 plus 3 equals 8. Multiplying 8 by 2 gives 16."
_ADD, _MULTIPLY = ("add", {"a": 5, "b": 3}), ("multiply", {"a": 8, "b": 2})


def _three_steps(call: Any, think: tuple[str, str] = ("", "")) -> tuple[str, ...]:
    """add, multiply, then the answer: each step's reasoning (wrapped in ``think``; none without markers) and text,
    then the call written by the engine's own renderer for the family (``call``)."""
    texts = ("I'll calculate that for you.", "Continuing the calculation.")
    open_, close = think
    reasoning = ("The user wants (5 + 3) * 2. First I add 5 and 3 with the add tool.",
                 "5 plus 3 is 8. Now I multiply 8 by 2 with the multiply tool.", "8 times 2 is 16. I can answer now.")
    thought = [f"{open_}{r}{close}" if close else "" for r in reasoning]  # no markers: the step does not reason
    return (f"{thought[0]}{texts[0]}" + call(*_ADD), f"{thought[1]}{texts[1]}" + call(*_MULTIPLY),
            f"{thought[2]}{_ANSWER}")


# What the model emits at each step, in its raw format, after the family's generation prompt; the engine appends the
# turn's stop token. Qwen3 opens its reasoning itself; Qwen3.5/3.6 and MiniMax-M2 prompts end inside "<think>\n";
# GLM's ends "<|assistant|><think>"; MiniMax-M3 without thinking_mode opens <mm:think> itself; DeepSeek with thinking
# off answers after the prompt's "</think>" (V3.1 straight after its tool output), without reasoning.
_QWEN3 = (
    "<think>\nThe user wants (5 + 3) * 2. First I add 5 and 3 with the add tool.\n</think>\n\n"
    "I'll calculate that for you.\n"
    '<tool_call>\n{"name": "add", "arguments": {"a": 5, "b": 3}}\n</tool_call>',
    "<think>\n5 plus 3 is 8. Now I multiply 8 by 2 with the multiply tool.\n</think>\n\n"
    "Continuing the calculation.\n"
    '<tool_call>\n{"name": "multiply", "arguments": {"a": 8, "b": 2}}\n</tool_call>',
    "<think>\n8 times 2 is 16. I can answer now.\n</think>\n\n" + _ANSWER,
)
_QWEN3_5 = (
    "The user wants (5 + 3) * 2. First I add 5 and 3 with the add tool.\n</think>\n\n"
    "I'll calculate that for you.\n\n"
    "<tool_call>\n<function=add>\n<parameter=a>\n5\n</parameter>\n<parameter=b>\n3\n</parameter>\n</function>\n"
    "</tool_call>",
    "5 plus 3 is 8. Now I multiply 8 by 2 with the multiply tool.\n</think>\n\n"
    "Continuing the calculation.\n\n"
    "<tool_call>\n<function=multiply>\n<parameter=a>\n8\n</parameter>\n<parameter=b>\n2\n</parameter>\n"
    "</function>\n</tool_call>",
    "8 times 2 is 16. I can answer now.\n</think>\n\n" + _ANSWER,
)
_GLM = _three_steps(render_glm_call, ("", "</think>"))
SCRIPTS: Mapping[str, tuple[str, ...]] = {
    "qwen3": _QWEN3,
    "qwen3_5": _QWEN3_5,
    "qwen3_6": _QWEN3_5,
    **{family: _GLM for family in ("glm4_7", "glm5", "glm5_1", "glm5_2")},
    "minimax_m2": _three_steps(render_minimax_call, ("", "\n</think>\n\n")),
    "minimax_m3": _three_steps(render_minimax_m3_call, ("<mm:think>", "</mm:think>")),
    "deepseek_v3_1": _three_steps(render_v31_call),
    **{family: _three_steps(lambda name, arguments, block=block: render_dsml_call(name, arguments, block))
       for family, block in (("deepseek_v3_2", "function_calls"), ("deepseek_v4", "tool_calls"))},
}


def engine_script(model: str, session_id: str = SESSION_ID) -> tuple[dict[str, Any], ...]:
    """The engine script entries of the calculator flow (the proxy sends the session id as the routing key)."""
    return tuple({"session": session_id, "output": output} for output in SCRIPTS[model])


# -- the agent (sync, official openai SDK; runs in a worker thread) ----------------------------------------------------


def run_tool(name: str, arguments: str) -> str:
    """Execute a calculator tool locally, as an agent would; errors go back to the model as text."""
    try:
        args = json.loads(arguments or "{}")
        a, b = args["a"], args["b"]
        if name == "add":
            value = a + b
        elif name == "multiply":
            value = a * b
        else:
            return f"error: unknown tool {name!r}"
    except (ValueError, KeyError, TypeError) as exc:
        return f"error: bad arguments {arguments!r}: {exc}"
    return str(int(value)) if float(value).is_integer() else str(value)


@attrs.frozen
class ToolRun:
    """One tool call the agent executed."""

    step: int
    call_id: str
    name: str
    arguments: str
    result: str


@attrs.frozen
class AgentRun:
    """What the agent did: the final conversation, its tool calls and its answer."""

    messages: tuple[dict[str, Any], ...]
    tool_runs: tuple[ToolRun, ...]
    answer: str | None
    steps: int
    #: per step: finish_reason and (streaming) the number of chunks received
    step_notes: tuple[str, ...]


def run_agent(base_url: str, *, model: str, stream: bool, on_delta: Any = None) -> AgentRun:
    """The agent loop: call the model, run the tools it asks for, repeat until it answers."""
    try:
        import openai  # a test dependency; imported here so `import proxy.demo` works without it
    except ImportError:
        raise SystemExit("the demo drives the proxy with the official openai SDK: pip install -e '.[test]' "
                         "(./dev demo does)") from None

    client = openai.OpenAI(
        base_url=base_url + "/v1", api_key="unused", max_retries=0,
        default_headers={"X-Session-Id": SESSION_ID, "X-Instance-Id": INSTANCE_ID},
    )
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT},
                                      {"role": "user", "content": USER_PROMPT}]
    tool_runs: list[ToolRun] = []
    notes: list[str] = []
    answer = None
    try:
        for step in range(1, MAX_STEPS + 1):
            request = dict(model=model, messages=messages, tools=TOOLS, temperature=0.7, top_p=0.9, max_tokens=512,
                           logprobs=True)
            if stream:
                message, finish, chunks = _streamed_message(client, request, step, on_delta)
                notes.append(f"finish_reason={finish}, streamed in {chunks} chunks")
            else:
                response = client.chat.completions.create(**request)
                choice = response.choices[0]
                message = _message_dict(choice.message)
                notes.append(f"finish_reason={choice.finish_reason}, {response.usage.completion_tokens} tokens")
            messages.append(message)
            calls = message.get("tool_calls") or []
            if not calls:
                answer = message.get("content")
                break
            for call in calls:
                function = call["function"]
                result = run_tool(function["name"], function["arguments"])
                tool_runs.append(ToolRun(step, call["id"], function["name"], function["arguments"], result))
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    finally:
        client.close()
    return AgentRun(tuple(messages), tuple(tool_runs), answer, len(notes), tuple(notes))


def _message_dict(message: Any) -> dict[str, Any]:
    """The SDK's assistant message as the dict the agent echoes back in its history."""
    out: dict[str, Any] = {"role": "assistant", "content": message.content}
    reasoning = getattr(message, "reasoning_content", None)
    if reasoning:
        out["reasoning_content"] = reasoning
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in message.tool_calls
        ]
    return out


def _streamed_message(client: Any, request: dict[str, Any], step: int, on_delta: Any) -> tuple[dict, str, int]:
    """One streamed call, its deltas accumulated into the assistant message (OpenAI's streaming format)."""
    content: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish, chunks = None, 0
    with client.chat.completions.create(**request, stream=True, stream_options={"include_usage": True}) as events:
        for chunk in events:
            chunks += 1
            for choice in chunk.choices:
                delta = choice.delta
                if delta.content:
                    content.append(delta.content)
                    if on_delta:
                        on_delta(step, "content", delta.content)
                piece = getattr(delta, "reasoning_content", None)
                if piece:
                    reasoning.append(piece)
                    if on_delta:
                        on_delta(step, "reasoning", piece)
                for call in delta.tool_calls or ():
                    slot = calls.setdefault(call.index, {"id": None, "type": "function",
                                                         "function": {"name": "", "arguments": ""}})
                    if call.id:
                        slot["id"] = call.id
                    if call.function and call.function.name:
                        slot["function"]["name"] += call.function.name
                        if on_delta:
                            on_delta(step, f"tool call #{call.index}", call.function.name + " ")
                    if call.function and call.function.arguments:
                        slot["function"]["arguments"] += call.function.arguments
                        if on_delta:
                            on_delta(step, f"tool call #{call.index}", call.function.arguments)
                if choice.finish_reason:
                    finish = choice.finish_reason
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None}
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = [calls[index] for index in sorted(calls)]
    return message, str(finish), chunks


# -- printing ------------------------------------------------------------------------------------------------------


@attrs.frozen
class Style:
    """ANSI styling, or none (not a terminal, or NO_COLOR set)."""

    enabled: bool

    def __call__(self, text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.enabled else text

    def dim(self, text: str) -> str:
        return self(text, "2")

    def hot(self, text: str) -> str:
        return self(text, "1;32")

    def head(self, text: str) -> str:
        return self(text, "1;36")


def print_transcript(run: AgentRun, out: TextIO, style: Style) -> None:
    out.write(style.head("== the agent's conversation (official openai SDK -> proxy) ==") + "\n")
    step = 0
    for message in run.messages:
        role = message["role"]
        if role == "assistant":
            step += 1
            note = run.step_notes[step - 1] if step <= len(run.step_notes) else ""
            out.write(f"[step {step}] assistant ({note})\n")
            if message.get("reasoning_content"):
                out.write(f"    reasoning: {message['reasoning_content'].strip()}\n")
            if message.get("content"):
                out.write(f"    content:   {message['content'].strip()}\n")
            for call in message.get("tool_calls") or ():
                out.write(f"    tool call: {call['function']['name']}({call['function']['arguments']})  "
                          f"id={call['id']}\n")
        elif role == "tool":
            out.write(f"         tool -> {message['content']}  (for {message['tool_call_id']})\n")
        else:
            out.write(f"{role}: {message['content']}\n")
    out.write("\n")


def mask_runs(mask: Sequence[int]) -> list[tuple[int, int, int]]:
    """``(start, end, mask value)`` of every run of equal mask values."""
    runs: list[tuple[int, int, int]] = []
    start = 0
    for position in range(1, len(mask) + 1):
        if position == len(mask) or mask[position] != mask[start]:
            runs.append((start, position, mask[start]))
            start = position
    return runs


def step_spans(segment: Mapping[str, Any]) -> dict[int, Any]:
    """Position where each step's generated tokens begin in the segment -> its step id (concat mode: each step
    record holds its own context fragment and generated ids, in path order); empty when the records do not add up."""
    spans, offset = {}, 0
    for record in segment.get("steps") or ():
        own = record.get("concat_token_ids")
        if own is None:
            return {}
        spans[offset + record["concat_context_token_count"]] = record.get("step_id")
        offset += len(own)
    return spans if offset == len(segment["token_ids"]) else {}


def _piece(token_text: bytes) -> str:
    """A token's text, quoted so whitespace and newlines show."""
    return json.dumps(token_text.decode("utf-8", errors="replace"), ensure_ascii=False)


def print_segment(segment: Mapping[str, Any], tokenizer: Any, out: TextIO, style: Style) -> None:
    ids, mask = segment["token_ids"], segment["loss_mask"]
    logprobs = segment.get("logprobs") or [None] * len(ids)
    versions = segment.get("weight_versions") or [None] * len(ids)
    trained = sum(mask)
    out.write(style.head(f"== segment {segment['trajectory_id']} ==") + "\n")
    out.write(f"boundary_reason: {segment['boundary_reason']}    turns: {segment['num_turns']}    "
              f"finish_reason: {segment['finish_reason']}    build_mode: {segment.get('build_mode')}\n")
    out.write(f"tokens: {len(ids)} = {len(ids) - trained} context (mask 0) + {trained} generated (mask 1)    "
              f"instance_id: {segment.get('instance_id')}    reward_info: {json.dumps(segment.get('reward_info'))}\n")
    out.write(style.dim("legend: '.' marks context tokens (mask 0, not trained), '#' generated tokens (mask 1)")
              + "\n\n")
    steps = step_spans(segment)
    for start, end, value in mask_runs(mask):
        if value == 0:
            out.write(f". mask 0  context  tokens [{start}, {end})  ({end - start} tokens)\n")
            text = tokenizer.decode(ids[start:end])
            for line in text.split("\n"):
                out.write(style.dim(f".   | {line}") + "\n")
        else:
            step = steps.get(start)
            span_logprob = sum(lp for lp in logprobs[start:end] if lp is not None)
            label = f"step {step}" if step is not None else "generated"
            out.write(style.hot(f"# mask 1  generated by {label}  tokens [{start}, {end})  ({end - start} tokens, "
                                f"logprob sum {span_logprob:.3f})") + "\n")
            out.write(f"#   {'pos':>5} {'token_id':>8}  mask  {'logprob':>8}  {'version':<10} text\n")
            for position in range(start, end):
                logprob = logprobs[position]
                shown = f"{logprob:8.4f}" if logprob is not None else f"{'-':>8}"
                row = (f"#   {position:>5} {ids[position]:>8}  {mask[position]:>4}  {shown}  "
                       f"{str(versions[position] or '-'):<10} {_piece(tokenizer.token_bytes(ids[position]))}")
                out.write(style.hot(row) + "\n")
        out.write("\n")


def print_summary(run: AgentRun, result: FinalizeResult, segments: Sequence[Mapping[str, Any]],
                  stats: TrajectoryStats, out: TextIO, style: Style) -> None:
    tokens = sum(len(s["token_ids"]) for s in segments)
    trained = sum(sum(s["loss_mask"]) for s in segments)
    generated_logprobs = [lp for s in segments for lp, m in zip(s.get("logprobs") or (), s["loss_mask"]) if m]
    out.write(style.head("== summary ==") + "\n")
    out.write(f"session {result.session_id}: {run.steps} model calls, {len(run.tool_runs)} tool calls "
              f"({', '.join(f'{t.name}({t.arguments}) = {t.result}' for t in run.tool_runs)})\n")
    out.write(f"final answer: {run.answer}\n")
    out.write(f"finalized: {result.segments} segment(s) {list(result.trajectory_ids)} from {result.steps} steps\n")
    out.write(f"tokens: {tokens} = {tokens - trained} context (mask 0) + {trained} generated (mask 1)")
    if generated_logprobs:
        out.write(f"; mean logprob of generated tokens {sum(generated_logprobs) / len(generated_logprobs):.4f}")
    out.write("\n")
    out.write(f"trajectory store: {stats.sessions} session(s), {stats.segments} segment(s), {stats.tokens} tokens, "
              f"{stats.bytes} bytes\n")


# -- the whole demo ------------------------------------------------------------------------------------------------


@attrs.frozen
class DemoResult:
    """What a demo run produced (for tests and callers)."""

    run: AgentRun
    finalized: FinalizeResult
    segments: tuple[dict[str, Any], ...]
    stats: TrajectoryStats


async def run_demo(
    *, model: str = "qwen3", stream: bool = False, seed: int = 0, token_rate: float = 0.0,
    out: TextIO = sys.stdout, style: Style | None = None,
) -> DemoResult:
    """Start the proxy on its embedded engine, run the agent, finalize, read and print the trajectory."""
    style = style or Style(False)
    tokenizer_path = await trio.to_thread.run_sync(model_tokenizer_path, get_family(model).tokenizer_folder)
    config = ProxyConfig(port=0, tokenizer_path=tokenizer_path, trajectory_build_model=model,
                         record_token_versions=True)
    engine_config = EngineConfig(tokenizer_path=tokenizer_path, seed=seed, token_rate=token_rate,
                                 weight_version=WEIGHT_VERSION, script_lines=engine_script(model))
    live = _live_printer(out, style) if stream else None
    async with trio.open_nursery() as nursery:
        handle: ProxyHandle = await nursery.start(run_proxy, config, engine_config)
        out.write(style.dim(f"proxy started in-process on its embedded engine (model family {model}, "
                            f"{'streaming' if stream else 'non-streaming'}, engine seed {seed})") + "\n\n")
        if live is not None:
            out.write(style.head("== streamed live ==") + "\n")
        run = await trio.to_thread.run_sync(lambda: run_agent(handle.url, model=model, stream=stream,
                                                              on_delta=live))
        if live is not None:
            out.write("\n\n")
        async with ProxyClient(handle.url) as proxy:
            reward = {"reward": 1.0 if run.answer and "16" in run.answer else 0.0}
            finalized = await proxy.finalize_session(SESSION_ID, instance_id=INSTANCE_ID, reward_info=reward)
            segments = await proxy.read_trajectory(session_id=SESSION_ID)
            stats = await proxy.stats()
        nursery.cancel_scope.cancel()
    tokenizer = await trio.to_thread.run_sync(load_tito_tokenizer, model, tokenizer_path)
    print_transcript(run, out, style)
    for segment in segments:
        print_segment(segment, tokenizer, out, style)
    print_summary(run, finalized, segments, stats, out, style)
    out.flush()
    return DemoResult(run, finalized, tuple(segments), stats)


def _live_printer(out: TextIO, style: Style) -> Any:
    """Print streamed deltas as they arrive (called from the agent's thread); trailing newlines of a part are held
    back so that each part ends on its own line."""
    state: dict[str, Any] = {"part": None, "held": ""}

    def on_delta(step: int, kind: str, text: str) -> None:
        if (step, kind) != state["part"]:
            out.write(f"\n[step {step}] {kind}: ")
            state["part"], state["held"] = (step, kind), ""
        text = state["held"] + text
        shown = text.rstrip("\n")
        state["held"] = text[len(shown):]
        out.write(style.dim(shown) if kind == "reasoning" else shown)
        out.flush()

    return on_delta


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m proxy.demo",
        description="Run a scripted calculator agent (two tool calls, then the answer) through the official openai "
        "SDK against the proxy on its embedded engine; print the recorded trajectory with loss masks and logprobs.",
    )
    parser.add_argument("--model", choices=sorted(SCRIPTS), default="qwen3",
                        help="model family: its tokenizer, chat template and raw tool-call format (default qwen3)")
    parser.add_argument("--stream", action="store_true", help="the agent streams its completions (SSE)")
    parser.add_argument("--seed", type=int, default=0, help="engine seed: logprobs depend on it (default 0)")
    parser.add_argument("--token-rate", type=float, default=0.0,
                        help="engine decode speed in tokens/s, e.g. 30 to watch --stream (default 0: unthrottled)")
    return parser


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = out or sys.stdout
    style = Style(out.isatty() and "NO_COLOR" not in os.environ)
    result = trio.run(lambda: run_demo(model=args.model, stream=args.stream, seed=args.seed,
                                       token_rate=args.token_rate, out=out, style=style))
    return 0 if result.run.answer and result.finalized.segments else 1


if __name__ == "__main__":
    raise SystemExit(main())
