"""Finalize, trajectory-read and resume bodies: values or 400 ApiErrors, never another exception."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.api.errors import ApiError, ErrorCode
from proxy.api.rollout_requests import FinalizeRequest, ResumeRequest, TrajectoryReadRequest
from tests.api import strategies as s

PARSERS = [FinalizeRequest.from_json, TrajectoryReadRequest.from_json, ResumeRequest.from_json]
ROLLOUT_KEYS = ["session_id", "instance_id", "rollout_id", "reward_info", "trajectory_id", "drain", "weight_version"]


@st.composite
def rollout_bodies(draw: st.DrawFn) -> Any:
    """Objects with the endpoints' keys set to valid ids or random values, or any value at all."""
    if draw(st.integers(0, 3)) == 0:
        return draw(s.any_value)
    return {key: draw(s.ascii_ids | s.any_value) for key in ROLLOUT_KEYS if draw(st.booleans())}


@settings(max_examples=300, deadline=None)
@given(body=rollout_bodies(), parser=st.sampled_from(PARSERS))
def test_rollout_parsers_return_a_value_or_raise_api_error_400(body: Any, parser: Any) -> None:
    try:
        parser(body)
    except ApiError as error:
        assert (error.status, error.code) == (400, ErrorCode.INVALID_REQUEST)


def test_finalize_request_reads_every_field() -> None:
    request = FinalizeRequest.from_json(
        {"session_id": "s", "instance_id": 4, "rollout_id": "r", "reward_info": {"reward": 1.0, "meta": [1]}, "x": 1}
    )
    assert request == FinalizeRequest("s", "4", "r", {"reward": 1.0, "meta": [1]})
    assert FinalizeRequest.from_json({"session_id": "s", "reward_info": None}) == FinalizeRequest("s")


@pytest.mark.parametrize(
    ("body", "param"),
    [({}, "session_id"), ({"session_id": ""}, "session_id"), ({"session_id": "a\tb"}, "session_id"),
     ({"session_id": "s", "reward_info": 1.0}, "reward_info"), ({"session_id": "s", "reward_info": [1]}, "reward_info"),
     ({"session_id": "s", "reward_info": {"r": float("nan")}}, "reward_info"),
     ({"session_id": "s", "instance_id": {"a": 1}}, "instance_id")],
)
def test_finalize_request_refuses_invalid_fields_naming_them(body: dict, param: str) -> None:
    with pytest.raises(ApiError) as info:
        FinalizeRequest.from_json(body)
    assert info.value.param == param


def test_finalize_request_refuses_a_deeply_nested_reward_info() -> None:
    deep: Any = 1
    for _ in range(10_000):
        deep = {"a": deep}
    with pytest.raises(ApiError):
        FinalizeRequest.from_json({"session_id": "s", "reward_info": deep})


def test_trajectory_read_request_needs_at_least_one_id() -> None:
    with pytest.raises(ApiError) as info:
        TrajectoryReadRequest.from_json({"drain": True})
    assert info.value.code == ErrorCode.INVALID_REQUEST
    assert TrajectoryReadRequest.from_json({"session_id": "s"}) == TrajectoryReadRequest("s", None, False)
    long_id = "s" * 256 + ":12"
    assert TrajectoryReadRequest.from_json({"trajectory_id": long_id, "drain": True}) == TrajectoryReadRequest(
        None, long_id, True
    )


def test_trajectory_read_request_drain_must_be_boolean() -> None:
    with pytest.raises(ApiError) as info:
        TrajectoryReadRequest.from_json({"session_id": "s", "drain": "yes"})
    assert info.value.param == "drain"


@pytest.mark.parametrize(
    ("body", "version"), [(None, None), ({}, None), ({"weight_version": None}, None), ({"weight_version": "v7"}, "v7"),
                          ({"weight_version": 12}, "12")],
)
def test_resume_request_takes_an_optional_weight_version(body: Any, version: str | None) -> None:
    assert ResumeRequest.from_json(body) == ResumeRequest(version)


@pytest.mark.parametrize("body", [[], "v1", {"weight_version": ""}, {"weight_version": True},
                                  {"weight_version": "a\nb"}, {"weight_version": "v" * 300}])
def test_resume_request_refuses_invalid_bodies(body: Any) -> None:
    with pytest.raises(ApiError):
        ResumeRequest.from_json(body)
