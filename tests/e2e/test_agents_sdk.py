"""The OpenAI Agents SDK (``openai-agents``) as a new user runs it: an Agent with one function tool, its default
model (the Responses API model, ``OpenAIResponsesModel``) served by the proxy, tracing off. The run calls the tool,
gets its result and answers; the session exports as ONE segment whose mask covers exactly what the engine
generated, run and streamed."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.e2e.harness import generated_ids

try:
    import agents
except ImportError as error:  # pragma: no cover - the test extra pins it
    agents = None
    IMPORT_ERROR = str(error)

SESSION = "agents-sdk"
OUTPUTS = [
    "<think>\nI should add them.\n</think>\n\n<tool_call>\n" + json.dumps({"name": "add", "arguments": {"a": 2, "b": 3}})
    + "\n</tool_call>",
    "<think>\nThe tool said 5.\n</think>\n\n2 plus 3 is 5.",
]


@pytest.mark.parametrize(("streamed", "chained"), [(False, False), (True, False), (False, True)],
                         ids=["run", "run_streamed", "run_chained"])
async def test_agent_with_a_function_tool_records_one_segment(start_proxy, streamed: bool, chained: bool) -> None:
    """``chained``: the SDK's ``auto_previous_response_id`` (each turn sends its new items and the previous
    response's id; the proxy's response chain supplies the rest)."""
    if agents is None:
        pytest.skip(f"openai-agents is not installed ({IMPORT_ERROR}): pip install -e '.[test]'")
    proxy = await start_proxy(model="qwen3", script=[{"session": SESSION, "output": o} for o in OUTPUTS])
    calls: list[tuple[int, int]] = []

    @agents.function_tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        calls.append((a, b))
        return a + b

    agent = agents.Agent(name="Calculator", instructions="You add numbers with the add tool.", tools=[add])

    async def run(client: Any) -> Any:
        config = agents.RunConfig(
            model_provider=agents.OpenAIProvider(openai_client=client, use_responses=True), tracing_disabled=True,
        )
        if not streamed:
            return await agents.Runner.run(agent, "What is 2 plus 3?", run_config=config,
                                           auto_previous_response_id=chained)
        result = agents.Runner.run_streamed(agent, "What is 2 plus 3?", run_config=config)
        kinds = [event.type async for event in result.stream_events()]
        assert "raw_response_event" in kinds and "run_item_stream_event" in kinds
        return result

    sent: list[dict[str, Any]] = []

    async def record(request: Any) -> None:
        sent.append(json.loads(request.content))

    result = await proxy.under_asyncio(run, default_headers={"X-Session-Id": SESSION},
                                       http_client=openai.DefaultAsyncHttpxClient(event_hooks={"request": [record]}))
    assert len(sent) == 2
    assert ("previous_response_id" in sent[1]) is chained
    assert len(sent[1]["input"]) == (1 if chained else 4)  # the tool's output alone, or the whole history
    assert calls == [(2, 3)]
    assert result.final_output == "2 plus 3 is 5."
    model = agents.OpenAIProvider(use_responses=True, api_key="unused").get_model(None)
    assert isinstance(model, agents.OpenAIResponsesModel)  # the default model is the Responses one

    segments = await proxy.segments(SESSION)
    assert len(segments) == 1, [segment["boundary_reason"] for segment in segments]
    segment = segments[0]
    requests = proxy.requests_of(SESSION)
    assert len(requests) == 2 and segment["num_turns"] == 2
    mask = [0] * len(segment["token_ids"])
    for record, output in zip(requests, OUTPUTS, strict=True):
        start, span = len(record.input_ids), list(record.output_ids)
        assert span == generated_ids(proxy.tito, output)
        assert segment["token_ids"][:start] == list(record.input_ids)
        assert segment["token_ids"][start:start + len(span)] == span
        mask[start:start + len(span)] = [1] * len(span)
        generated = segment["logprobs"][start:start + len(span)]
        assert all(value <= 0 for value in generated) and any(value < 0 for value in generated)
    assert segment["loss_mask"] == mask
