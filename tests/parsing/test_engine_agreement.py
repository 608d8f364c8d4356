"""Property 3: the local parsers agree with SGLang's ``/parse_function_call`` and ``/separate_reasoning`` (the
embedded engine, the project's SGLang stand-in, over a real socket) on well-formed outputs of both formats, and
the ``sglang_api`` backend then gives the same messages as ``local``, streamed or not."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import EngineConfig, serve_engine
from proxy.parsing import MessageFormat, MessageParser, ParserConfig, ToolCallFormat, ToolSpecs, parse_local
from proxy.parsing.local import split_reasoning
from proxy.parsing.parser import reasoning_request, sglang_reasoning_split
from proxy.upstream.client import SGLangClient
from serving.tokenizer_files import ensure_tokenizers, model_tokenizer_path

from .strategies import TOOLS, cuts, well_formed_output

SPECS = ToolSpecs.from_openai(TOOLS)
PARSER_NAME = {ToolCallFormat.JSON: "qwen25", ToolCallFormat.XML: "qwen3_coder"}


@functools.cache
def _qwen3_path() -> Path:
    # Hypothesis examples cannot use function-scoped fixtures; verify the tokenizer files once.
    return model_tokenizer_path("qwen3", ensure_tokenizers())


@asynccontextmanager
async def sglang_stand_in() -> AsyncIterator[SGLangClient]:
    async with trio.open_nursery() as nursery:
        handle = await nursery.start(serve_engine, EngineConfig(tokenizer_path=_qwen3_path(), port=0))
        async with SGLangClient.single_server(handle.url) as client:
            yield client
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("tool_format", [ToolCallFormat.JSON, ToolCallFormat.XML])
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
async def test_local_parsers_agree_with_the_sglang_stand_in_on_well_formed_outputs(
    tool_format: ToolCallFormat, data: st.DataObject
) -> None:
    outputs = data.draw(st.lists(well_formed_output(tool_format), min_size=1, max_size=6), label="outputs")
    parser_name = PARSER_NAME[tool_format]
    fmt = MessageFormat(tool_format, reasoning=True)
    async with sglang_stand_in() as client:
        remote = MessageParser(ParserConfig(tool_call_type=parser_name), client)  # sglang_api for both
        for text, open_at_start, n_calls in outputs:
            # /separate_reasoning (told about an open block the only way it can be: a leading <think>); SGLang 0.5.23
            # keeps the whitespace around the markers, which is the only difference (documented difference 1)
            local_split = split_reasoning(text, open_at_start=open_at_start)
            sent = reasoning_request(text, open_at_start)
            reply = await client.separate_reasoning(sent, "qwen3")
            theirs = sglang_reasoning_split(reply, closed="</think>" in sent)
            assert (theirs.reasoning or "", theirs.rest.strip()) == (local_split.reasoning or "",
                                                                     local_split.rest.strip())

            # /parse_function_call on the answer part
            local = parse_local(local_split.rest, MessageFormat(tool_format, False), SPECS, session_id="s",
                                step_index=0)
            reply_calls = await client.parse_function_call(local_split.rest, parser_name, TOOLS)
            assert reply_calls.normal_text.strip() == local.content  # without calls SGLang returns the text as is
            assert [(c.name, c.parameters) for c in reply_calls.calls] == [
                (c.name, c.arguments_json) for c in local.tool_calls]
            assert len(local.tool_calls) == n_calls and not local.flags

            # The whole path: sglang_api backends == local, non-streaming and streaming.
            expected = parse_local(text, fmt, SPECS, session_id="s", step_index=0,
                                   reasoning_open_at_start=open_at_start)
            final = await remote.parse_final(text, TOOLS, session_id="s", step_index=0,
                                             reasoning_open_at_start=open_at_start)
            assert final == expected
            stream = remote.stream(TOOLS, session_id="s", step_index=0, reasoning_open_at_start=open_at_start)
            for piece in data.draw(cuts(text), label="pieces"):
                stream.feed(piece)
            await stream.finish()
            assert stream.message == expected
        assert remote.statistics().mismatches == 0


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(texts=st.lists(st.text(min_size=0, max_size=40).filter(lambda t: "<think>" not in t and "</think>" not in t),
                      min_size=1, max_size=10))
async def test_the_stand_in_answers_marker_free_text_as_all_normal_text(texts: list[str]) -> None:
    """Why the ``sglang_api`` reasoning backend skips marker-free text that was not open at the start: SGLang's
    ``qwen3`` detector (reasoning not forced) returns such a text unchanged as normal text, with no reasoning."""
    async with sglang_stand_in() as client:
        for text in texts:
            reply = await client.separate_reasoning(text, "qwen3")
            assert (reply.reasoning_text, reply.text) == ("", text)
