"""The calculator session every model family's e2e test runs (GLM, MiniMax-M2, MiniMax-M3): the proxy on its embedded
engine (which speaks the family's markup), the official openai SDK as the agent echoing each answer back (reasoning
included, as the demo agent does), a tool result after every call, then the session's segments.

The family tests differ only in the markup they script, the token a turn ends with, and the official render they
compare the single segment with; they share this loop instead of copying it."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from engine import EngineConfig
from proxy.cli import run_proxy
from proxy.config import ProxyConfig
from proxy.demo import _message_dict
from proxy.families import load_tito_tokenizer
from tests.e2e.harness import CALCULATOR_TOOLS, Proxy

MESSAGES = ({"role": "system", "content": "You are a calculator."},
            {"role": "user", "content": "Please add 5 and 3, then multiply by 2."})


@attrs.frozen
class SessionRun:
    """What one session left: the conversation as the agent sent it last, each turn's generated ids, the segments."""

    tito: Any
    messages: list[dict[str, Any]]
    generated: list[list[int]]
    segments: list[dict[str, Any]]

    def assert_one_segment_equal_to(self, official_ids: Sequence[int]) -> None:
        """One segment, token-exact: its ids are ``official_ids``; every turn in it; the mask covers what the model
        generated, nothing else."""
        assert len(self.segments) == 1, [s.get("boundary_reason") for s in self.segments]
        segment = self.segments[0]
        assert segment["token_ids"] == list(official_ids)
        assert segment["num_turns"] == len(self.generated)
        assert sum(segment["loss_mask"]) == sum(len(g) for g in self.generated)


async def run_calculator_session(
    nursery: trio.Nursery,
    *,
    family: str,
    path: Path,
    session: str,
    script: Sequence[str] = (),
    turns: int,
    backend: str = "local",
    ends: tuple[str, str],
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> SessionRun:
    """``turns`` turns of the calculator task: every turn but the last must call ``add`` or ``multiply`` with ``a`` and
    ``b`` and end with ``ends[0]``; the last must answer without calls and end with ``ends[1]``. ``script``: the
    engine's outputs for the session (empty: its default policy); ``backend``: both parser backends (``sglang_api``
    asks the engine's SGLang endpoints)."""
    lines = tuple({"session": session, "output": output} for output in script)
    config = ProxyConfig(port=0, tokenizer_path=path, trajectory_build_model=family,
                         tool_call_parse_backend=backend, reasoning_parse_backend=backend)
    handle = await nursery.start(run_proxy, config, EngineConfig(tokenizer_path=path, script_lines=lines))
    tito = load_tito_tokenizer(family, path)
    messages: list[dict[str, Any]] = [dict(m) for m in MESSAGES]
    generated: list[list[int]] = []
    extra_body: dict[str, Any] = {"return_token_ids": True}
    if chat_template_kwargs is not None:
        extra_body["chat_template_kwargs"] = dict(chat_template_kwargs)
    proxy = Proxy(handle, path, family)
    async with proxy.async_client() as client:
        for turn in range(turns):
            completion = await client.chat.completions.create(
                model=family, messages=messages, tools=CALCULATOR_TOOLS,
                extra_headers={"X-Session-Id": session}, extra_body=extra_body)
            choice, body = completion.choices[0], completion.model_extra
            generated.append(body["token_ids"])
            messages.append(_message_dict(choice.message))
            last = turn == turns - 1
            assert tito.decode(body["token_ids"][-1:]) == ends[1 if last else 0]
            if not last:
                assert choice.finish_reason == "tool_calls", choice
                tool_call = choice.message.tool_calls[0]
                assert tool_call.function.name in ("add", "multiply")
                assert set(json.loads(tool_call.function.arguments)) == {"a", "b"}
                messages.append({"role": "tool", "tool_call_id": tool_call.id, "content": str(8 * (turn + 1))})
            else:
                assert choice.finish_reason == "stop" and choice.message.content and not choice.message.tool_calls
    return SessionRun(tito, messages, generated, await proxy.segments(session))


def official_ids(run: SessionRun, messages: Sequence[Mapping[str, Any]], *, suffix: str = "", cut: int = 0,
                 chat_template_kwargs: Mapping[str, Any] | None = None) -> list[int]:
    """The official template's render of ``messages`` (no generation prompt), ``cut`` characters off its end, plus
    ``suffix`` (the stop token the model generated where the template writes the next turn), as ids."""
    text = run.tito.render_full(messages, CALCULATOR_TOOLS, chat_template_kwargs, add_generation_prompt=False)
    return run.tito.encode_text(text[: len(text) - cut] + suffix)
