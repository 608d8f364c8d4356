"""The operator chooses which header carries the session id (issue 14, item 10), through a real proxy: an agent that
sends its own ``X-Session-Id`` no longer splits the rollout's session."""

from __future__ import annotations

import pytest

from proxy.cli import build_parser
from proxy.config import proxy_config_from_args

SYSTEM = {"role": "system", "content": "You are terse."}


async def test_the_operators_header_wins_and_the_agents_header_is_the_fallback(start_proxy) -> None:
    proxy = await start_proxy(
        session_id_headers=("X-Rollout-Session", "X-Session-Id"),
        script=[{"session": "*", "output": text} for text in ("One.", "Two.", "Three.")],
    )
    messages = [SYSTEM, {"role": "user", "content": "first"}]
    # The agent's framework stamps every request with its own conversation id: two steps, two different ids.
    first = await proxy.post("/v1/chat/completions", {"messages": messages},
                             {"X-Rollout-Session": "rollout-1", "X-Session-Id": "agent-conv-a"})
    assert first.status_code == 200, first.text
    messages += [first.json()["choices"][0]["message"], {"role": "user", "content": "second"}]
    second = await proxy.post("/v1/chat/completions", {"messages": messages},
                              {"X-Rollout-Session": "rollout-1", "X-Session-Id": "agent-conv-b"})
    assert second.status_code == 200, second.text
    # One session, one chain: the rollout's id keyed both steps (upstream routing too).
    assert [segment["step_ids"] for segment in await proxy.segments("rollout-1")] == [[1, 2]]
    assert [record.routing_key for record in proxy.engine.request_log] == ["rollout-1", "rollout-1"]
    assert await proxy.debug("agent-conv-a") is None and await proxy.debug("agent-conv-b") is None
    # Without the operator's header, the agent's is the next in line.
    alone = await proxy.post("/v1/chat/completions", {"messages": [SYSTEM, {"role": "user", "content": "x"}]},
                             {"X-Session-Id": "agent-only"})
    assert alone.status_code == 200 and (await proxy.debug("agent-only"))["steps"] == 1


async def test_without_the_body_fallback_a_request_names_the_operators_header(start_proxy) -> None:
    proxy = await start_proxy(session_id_headers=("X-Rollout-Session",), session_id_body_field=None)
    refused = await proxy.post("/v1/chat/completions",
                               {"messages": [SYSTEM, {"role": "user", "content": "x"}], "session_id": "from-body"},
                               {"X-Session-Id": "agent"})
    error = refused.json()["error"]
    assert (refused.status_code, error["code"], error["param"]) == (400, "missing_session_id", "X-Rollout-Session")
    assert "X-Rollout-Session" in error["message"] and "session_id" not in error["message"].split("header")[0]
    assert list(proxy.engine.request_log) == []  # refused before anything went upstream


@pytest.mark.parametrize("from_env", [False, True])
async def test_the_flag_or_its_env_var_configures_a_running_proxy(start_proxy, monkeypatch, from_env) -> None:
    if from_env:
        monkeypatch.setenv("DRESSAGE_PROXY_SESSION_ID_HEADER", "X-Rollout-Session,X-Session-Id")
        config = proxy_config_from_args(build_parser().parse_args([]))
    else:
        config = proxy_config_from_args(build_parser().parse_args(
            ["--session-id-header", "X-Rollout-Session", "--session-id-header", "X-Session-Id"]))
    proxy = await start_proxy(session_id_headers=config.session_id_headers,
                              script=[{"session": "*", "output": "Ok."}])
    answer = await proxy.post("/v1/chat/completions", {"messages": [SYSTEM, {"role": "user", "content": "x"}]},
                              {"X-Session-Id": "agent", "X-Rollout-Session": "mine"})
    assert answer.status_code == 200, answer.text
    assert (await proxy.debug("mine"))["steps"] == 1 and await proxy.debug("agent") is None
