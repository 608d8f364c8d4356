"""ApiError: every stable code's status and type, the OpenAI error shape, translations from other layers."""

from __future__ import annotations

import json

import httpx2
import openai
import pytest

from proxy.api import errors as errors_module
from proxy.api.errors import ERROR_TABLE, ApiError, ErrorCode
from proxy.controllers import errors as session_errors

NAMED = {
    ErrorCode.MISSING_SESSION_ID: lambda: ApiError.missing_session_id(),
    ErrorCode.INVALID_REQUEST: lambda: ApiError.invalid_request("bad", "temperature"),
    ErrorCode.UNSUPPORTED_PARAMETER: lambda: ApiError.unsupported_parameter("n=2", "n"),
    ErrorCode.CONTEXT_OVERFLOW: lambda: ApiError.context_overflow(4096, 4096),
    ErrorCode.TRAJECTORY_VERSION_CHANGED: lambda: ApiError.trajectory_version_changed("v1 -> v2"),
    ErrorCode.MAX_STEPS_EXCEEDED: lambda: ApiError.max_steps_exceeded("100 steps"),
    ErrorCode.SESSION_FINALIZED: lambda: ApiError.session_finalized("finalized"),
    ErrorCode.INVALID_MESSAGES: lambda: ApiError.of(ErrorCode.INVALID_MESSAGES, "no messages"),
    ErrorCode.SESSION_ABORTED: lambda: ApiError.of(ErrorCode.SESSION_ABORTED, "aborted"),
    ErrorCode.EXPORT_FAILED: lambda: ApiError.of(ErrorCode.EXPORT_FAILED, "the store failed; retry finalize"),
    ErrorCode.RESPONSE_MASK_MISMATCH: lambda: ApiError.response_mask_mismatch(expected=3, got=2),
    ErrorCode.UPSTREAM_UNAVAILABLE: lambda: ApiError.upstream_unavailable("connection refused"),
    ErrorCode.UPSTREAM_ERROR: lambda: ApiError.upstream_error("SGLang said 500"),
    ErrorCode.PAUSED_TIMEOUT: lambda: ApiError.paused_timeout(30.0, 5.0),
    ErrorCode.UPSTREAM_ABORTED: lambda: ApiError.of(ErrorCode.UPSTREAM_ABORTED, "aborted upstream"),
    ErrorCode.UPSTREAM_PROTOCOL_ERROR: lambda: ApiError.of(ErrorCode.UPSTREAM_PROTOCOL_ERROR, "token id 999999"),
    ErrorCode.WEIGHT_VERSION_CHANGED: lambda: ApiError.of(ErrorCode.WEIGHT_VERSION_CHANGED, "v1 -> v2 mid-request"),
    ErrorCode.GENERATION_RESTARTED: lambda: ApiError.of(ErrorCode.GENERATION_RESTARTED, "restarted"),
    ErrorCode.RESUME_REFUSED: lambda: ApiError.of(ErrorCode.RESUME_REFUSED, "a pause is in progress"),
    ErrorCode.NOT_FOUND: lambda: ApiError.not_found(),
    ErrorCode.METHOD_NOT_ALLOWED: lambda: ApiError.method_not_allowed(),
    ErrorCode.REQUEST_TOO_LARGE: lambda: ApiError.request_too_large(),
    ErrorCode.INTERNAL_ERROR: lambda: ApiError.internal_error(),
}

EXPECTED_STATUS = {
    ErrorCode.MISSING_SESSION_ID: 400, ErrorCode.INVALID_REQUEST: 400, ErrorCode.UNSUPPORTED_PARAMETER: 400,
    ErrorCode.CONTEXT_OVERFLOW: 400, ErrorCode.TRAJECTORY_VERSION_CHANGED: 400, ErrorCode.MAX_STEPS_EXCEEDED: 400,
    ErrorCode.SESSION_FINALIZED: 400, ErrorCode.INVALID_MESSAGES: 400, ErrorCode.SESSION_ABORTED: 409,
    ErrorCode.RESPONSE_MASK_MISMATCH: 422, ErrorCode.UPSTREAM_UNAVAILABLE: 502, ErrorCode.UPSTREAM_ERROR: 502,
    ErrorCode.PAUSED_TIMEOUT: 503, ErrorCode.NOT_FOUND: 404, ErrorCode.METHOD_NOT_ALLOWED: 405,
    ErrorCode.REQUEST_TOO_LARGE: 413, ErrorCode.INTERNAL_ERROR: 500, ErrorCode.UPSTREAM_ABORTED: 502,
    ErrorCode.WEIGHT_VERSION_CHANGED: 502, ErrorCode.GENERATION_RESTARTED: 503, ErrorCode.RESUME_REFUSED: 409,
    ErrorCode.EXPORT_FAILED: 500, ErrorCode.UPSTREAM_PROTOCOL_ERROR: 502,
}


def test_every_error_code_has_a_table_entry_and_a_named_constructor() -> None:
    assert set(ERROR_TABLE) == set(ErrorCode) == set(NAMED) == set(EXPECTED_STATUS)


@pytest.mark.parametrize("code", list(ErrorCode), ids=str)
def test_each_error_code_has_its_documented_status_and_openai_shape(code: ErrorCode) -> None:
    error = NAMED[code]()
    assert (error.status, error.code) == (EXPECTED_STATUS[code], code)
    body = json.loads(error.to_body())
    assert list(body) == ["error"]
    assert list(body["error"])[:4] == ["message", "type", "param", "code"]
    assert body["error"]["code"] == code.value
    server_side = (ErrorCode.PAUSED_TIMEOUT, ErrorCode.INTERNAL_ERROR, ErrorCode.WEIGHT_VERSION_CHANGED,
                   ErrorCode.GENERATION_RESTARTED, ErrorCode.EXPORT_FAILED)
    assert body["error"]["type"] == ("server_error" if code in server_side
                                     else "upstream_error" if code.value.startswith("upstream")
                                     else "invalid_request_error")
    assert f"``{code.value}`` | {EXPECTED_STATUS[code]}" in errors_module.__doc__


def test_context_overflow_carries_prompt_tokens_and_window() -> None:
    error = ApiError.context_overflow(5000, 4096).to_json()["error"]
    assert (error["prompt_tokens"], error["context_window"], error["code"]) == (5000, 4096, "context_overflow")


def test_response_mask_mismatch_is_422_with_expected_and_got() -> None:
    error = ApiError.response_mask_mismatch(expected=3, got=1)
    body = error.to_json()["error"]
    assert (error.status, body["param"], body["expected"], body["got"]) == (422, "response_mask", 3, 1)


@pytest.mark.parametrize(("retry_after", "header"), [(0.2, "1"), (4.1, "5"), (float("inf"), "1")])
def test_paused_timeout_is_503_with_a_whole_second_retry_after_header(retry_after: float, header: str) -> None:
    error = ApiError.paused_timeout(12.0, retry_after)
    assert (error.status, dict(error.headers)) == (503, {"Retry-After": header})


def test_upstream_unavailable_may_be_503_but_not_4xx() -> None:
    assert ApiError.upstream_unavailable("overloaded", status=503).status == 503
    with pytest.raises(ValueError):
        ApiError.upstream_unavailable("x", status=400)


def test_details_never_override_the_standard_members() -> None:
    error = ApiError(400, "invalid_request", "real", "p", details={"message": "fake", "code": "fake", "extra": 1})
    assert error.to_json()["error"] == {"message": "real", "type": "invalid_request_error", "param": "p",
                                        "code": "invalid_request", "extra": 1}


def test_constructor_refuses_non_error_statuses() -> None:
    with pytest.raises(ValueError):
        ApiError(200, "invalid_request", "ok")


@pytest.mark.parametrize(
    ("status", "code"),
    [(404, "not_found"), (405, "method_not_allowed"), (413, "request_too_large"), (400, "invalid_request"),
     (415, "invalid_request"), (500, "internal_error"), (302, "internal_error")],
)
def test_from_http_status_maps_werkzeug_exceptions_onto_codes(status: int, code: str) -> None:
    error = ApiError.from_http_status(status, "description")
    assert error.code == code
    assert error.status == (status if status >= 400 else 500)


@pytest.mark.parametrize(
    ("exc", "status", "code"),
    [
        (session_errors.SessionFinalizedError("gone"), 400, "session_finalized"),
        (session_errors.MaxStepsExceededError(10, 10, 0), 400, "max_steps_exceeded"),
        (session_errors.ResponseMaskMismatchError(expected=4, got=2), 422, "response_mask_mismatch"),
        (session_errors.InvalidMessagesError("none"), 400, "invalid_messages"),
        (session_errors.SessionAbortedError("aborted"), 409, "session_aborted"),
        (session_errors.ExportFailedError("s1", 3, "export failed: OSError"), 500, "export_failed"),
    ],
)
def test_from_session_error_keeps_the_session_layers_code_and_status(exc: Exception, status: int, code: str) -> None:
    error = ApiError.from_session_error(exc)
    assert (error.status, error.code, error.message) == (status, code, str(exc))
    if code == "response_mask_mismatch":
        assert (error.details["expected"], error.details["got"], error.param) == (4, 2, "response_mask")


# -- the official SDK reads the errors ---------------------------------------------------------------------------------


def sdk_client(error: ApiError) -> openai.OpenAI:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(error.status, content=error.to_body(), headers={
            "content-type": "application/json", **error.headers})

    return openai.OpenAI(api_key="x", base_url="http://proxy.test/v1", max_retries=0,
                         http_client=httpx2.Client(transport=httpx2.MockTransport(handler)))


@pytest.mark.parametrize(
    ("error", "exception"),
    [(ApiError.missing_session_id(), openai.BadRequestError),
     (ApiError.response_mask_mismatch(3, 1), openai.UnprocessableEntityError),
     (ApiError.paused_timeout(30, 5), openai.InternalServerError),
     (ApiError.not_found("no such route"), openai.NotFoundError)],
)
def test_openai_sdk_raises_its_error_class_with_our_code_and_param(error: ApiError, exception: type) -> None:
    with pytest.raises(exception) as info:
        sdk_client(error).chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert (info.value.code, info.value.param, info.value.type) == (error.code, error.param, error.type)
    assert info.value.status_code == error.status
