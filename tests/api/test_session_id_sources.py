"""Where a request's session id is read is configurable (issue 14, item 10): ``SessionIdSources``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.api import ApiError, ChatCompletionRequest
from proxy.api.errors import ErrorCode
from proxy.api.session_identity import DEFAULT_SESSION_ID_SOURCES, SessionIdSources

USER = [{"role": "user", "content": "hi"}]
ROLLOUT_FIRST = SessionIdSources(("X-Rollout-Session", "X-Session-Id"))


def parse(body: dict, headers: dict, sources: SessionIdSources = DEFAULT_SESSION_ID_SOURCES) -> ChatCompletionRequest:
    return ChatCompletionRequest.from_http(body, headers, sources)


def test_the_default_sources_are_spec_3_1s_order() -> None:
    default = DEFAULT_SESSION_ID_SOURCES
    assert (default.headers, default.body_field) == (("X-Session-Id",), "session_id")
    everything = {"x-smg-routing-key": "key", "X-Session-Id": "header"}
    assert parse({"messages": USER, "session_id": "body"}, everything).session_id == "header"
    assert ChatCompletionRequest.from_http({"messages": USER, "session_id": "body"}, everything).session_id == "header"
    error = ApiError.missing_session_id()
    assert (error.param, error.message) == ("X-Session-Id", (
        "no session id: send the X-Session-Id header (or a body field session_id, or the X-SMG-Routing-Key header); "
        "it keys the recorded trajectory"
    ))


def test_the_operators_header_wins_over_the_agents_x_session_id() -> None:
    both = parse({"messages": USER}, {"X-Session-Id": "agent-conversation", "x-rollout-session": "rollout-7"},
                 ROLLOUT_FIRST)
    assert (both.session_id, both.session_id_source) == ("rollout-7", "header")
    agent_only = parse({"messages": USER, "session_id": "body"}, {"X-Session-Id": "agent"}, ROLLOUT_FIRST)
    assert (agent_only.session_id, agent_only.session_id_source) == ("agent", "header")
    body = parse({"messages": USER, "session_id": "body"}, {"X-Rollout-Session": "  "}, ROLLOUT_FIRST)
    assert (body.session_id, body.session_id_source) == ("body", "body")
    key = parse({"messages": USER}, {"X-SMG-Routing-Key": "key"}, ROLLOUT_FIRST)
    assert (key.session_id, key.session_id_source) == ("key", "routing_key")


def test_an_operator_header_alone_ignores_the_agents_x_session_id() -> None:
    mine_only = SessionIdSources(("X-Rollout-Session",), body_field=None)
    request = parse({"messages": USER, "session_id": "agent-body"},
                    {"X-Session-Id": "agent", "X-Rollout-Session": "r1"}, mine_only)
    assert request.session_id == "r1"
    with pytest.raises(ApiError) as refused:
        parse({"messages": USER, "session_id": "agent-body"}, {"X-Session-Id": "agent"}, mine_only)
    error = refused.value
    assert (error.status, error.code, error.param) == (400, ErrorCode.MISSING_SESSION_ID, "X-Rollout-Session")
    assert error.message == (
        "no session id: send the X-Rollout-Session header (or the X-SMG-Routing-Key header); it keys the recorded "
        "trajectory"
    )


def test_a_custom_body_field_and_the_missing_message_names_every_source() -> None:
    sources = SessionIdSources(("X-A", "X-B"), body_field="rollout_session")
    assert parse({"messages": USER, "rollout_session": "r"}, {}, sources).session_id == "r"
    with pytest.raises(ApiError) as refused:
        parse({"messages": USER, "session_id": "ignored"}, {}, sources)
    assert refused.value.message == (
        "no session id: send the X-A header (or the X-B header, or a body field rollout_session, or the "
        "X-SMG-Routing-Key header); it keys the recorded trajectory"
    )


def test_a_bad_id_in_a_configured_header_names_that_header() -> None:
    with pytest.raises(ApiError) as refused:
        parse({"messages": USER}, {"X-Rollout-Session": "é" * 3}, ROLLOUT_FIRST)
    assert (refused.value.code, refused.value.param) == (ErrorCode.INVALID_REQUEST, "X-Rollout-Session")


def test_sources_need_a_header() -> None:
    with pytest.raises(ValueError):
        SessionIdSources(())


NAMES = st.sampled_from(["X-A", "X-B", "X-C", "X-Session-Id"])


@given(
    order=st.lists(NAMES, min_size=1, max_size=4, unique=True),
    present=st.dictionaries(NAMES, st.sampled_from(["v1", "v2", "v3"]), max_size=4),
    body_value=st.sampled_from([None, "", "b1"]),
    routing_key=st.sampled_from([None, "k1"]),
)
def test_the_first_present_source_in_precedence_order_wins(order, present, body_value, routing_key) -> None:
    headers = {name.lower(): value for name, value in present.items()}
    if routing_key:
        headers["x-smg-routing-key"] = routing_key
    body = {"messages": USER, **({"session_id": body_value} if body_value is not None else {})}
    expected = next((present[name] for name in order if name in present), None) or body_value or routing_key
    try:
        request = parse(body, headers, SessionIdSources(tuple(order)))
    except ApiError as error:
        assert expected is None and error.code == ErrorCode.MISSING_SESSION_ID and error.param == order[0]
    else:
        assert request.session_id == expected
