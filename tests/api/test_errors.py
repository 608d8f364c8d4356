"""ApiError: every stable code's status and type, the OpenAI error shape, translations from other layers."""

from __future__ import annotations

import json

import httpx2
import openai
import pytest

from proxy.api import error_mapping
from proxy.api.errors import ERROR_TABLE, ApiError, ErrorCode, client_safe_text
from proxy.controllers.session_leases import SessionBusyError
from proxy.request_id import _current as current_request_id_var
from proxy.trajectory import session_errors
from proxy.trajectory.store import LeaseLostError

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
    ErrorCode.STORE_UNAVAILABLE: lambda: ApiError.of(ErrorCode.STORE_UNAVAILABLE, "the store is down; retry"),
    ErrorCode.RESPONSE_MASK_MISMATCH: lambda: ApiError.response_mask_mismatch(expected=3, got=2),
    ErrorCode.UPSTREAM_UNAVAILABLE: lambda: ApiError.upstream_unavailable("connection refused"),
    ErrorCode.UPSTREAM_ERROR: lambda: ApiError.upstream_error("SGLang said 500"),
    ErrorCode.UPSTREAM_OVERLOADED: lambda: ApiError.of(ErrorCode.UPSTREAM_OVERLOADED, "busy (HTTP 503)"),
    ErrorCode.UPSTREAM_REJECTED: lambda: ApiError.of(ErrorCode.UPSTREAM_REJECTED, "refused (HTTP 400)"),
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
    ErrorCode.INVALID_IDEMPOTENCY_KEY: lambda: ApiError.of(ErrorCode.INVALID_IDEMPOTENCY_KEY, "bad key"),
    ErrorCode.IDEMPOTENCY_KEY_REUSED: lambda: ApiError.of(ErrorCode.IDEMPOTENCY_KEY_REUSED, "reused"),
    ErrorCode.TOO_MANY_MESSAGES: lambda: ApiError.of(ErrorCode.TOO_MANY_MESSAGES, "too many", "messages"),
    ErrorCode.HEADERS_TOO_LARGE: lambda: ApiError.of(ErrorCode.HEADERS_TOO_LARGE, "headers too large"),
    ErrorCode.REQUEST_TIMEOUT: lambda: ApiError.of(ErrorCode.REQUEST_TIMEOUT, "too slow"),
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: lambda: ApiError.of(ErrorCode.UNSUPPORTED_MEDIA_TYPE, "not json"),
    ErrorCode.UNAUTHORIZED: lambda: ApiError.of(ErrorCode.UNAUTHORIZED, "no key"),
    ErrorCode.FORBIDDEN: lambda: ApiError.of(ErrorCode.FORBIDDEN, "foreign origin"),
    ErrorCode.SHUTTING_DOWN: lambda: ApiError.of(ErrorCode.SHUTTING_DOWN, "stopping"),
    ErrorCode.SESSION_BUSY: lambda: error_mapping.api_error_for(SessionBusyError("s", "host:1:2", 2.5)),
    ErrorCode.SESSION_MOVED: lambda: error_mapping.api_error_for(LeaseLostError("s", 3)),
}

EXPECTED_STATUS = {
    ErrorCode.MISSING_SESSION_ID: 400, ErrorCode.INVALID_REQUEST: 400, ErrorCode.UNSUPPORTED_PARAMETER: 400,
    ErrorCode.CONTEXT_OVERFLOW: 400, ErrorCode.TRAJECTORY_VERSION_CHANGED: 400, ErrorCode.MAX_STEPS_EXCEEDED: 400,
    ErrorCode.SESSION_FINALIZED: 400, ErrorCode.INVALID_MESSAGES: 400, ErrorCode.SESSION_ABORTED: 409,
    ErrorCode.RESPONSE_MASK_MISMATCH: 422, ErrorCode.UPSTREAM_UNAVAILABLE: 502, ErrorCode.UPSTREAM_ERROR: 502,
    ErrorCode.PAUSED_TIMEOUT: 503, ErrorCode.NOT_FOUND: 404, ErrorCode.METHOD_NOT_ALLOWED: 405,
    ErrorCode.REQUEST_TOO_LARGE: 413, ErrorCode.INTERNAL_ERROR: 500, ErrorCode.UPSTREAM_ABORTED: 502,
    ErrorCode.WEIGHT_VERSION_CHANGED: 502, ErrorCode.GENERATION_RESTARTED: 503, ErrorCode.RESUME_REFUSED: 409,
    ErrorCode.EXPORT_FAILED: 500, ErrorCode.STORE_UNAVAILABLE: 503, ErrorCode.UPSTREAM_OVERLOADED: 503, ErrorCode.UPSTREAM_REJECTED: 400,
    ErrorCode.UPSTREAM_PROTOCOL_ERROR: 502, ErrorCode.INVALID_IDEMPOTENCY_KEY: 400, ErrorCode.IDEMPOTENCY_KEY_REUSED: 422,
    ErrorCode.TOO_MANY_MESSAGES: 400, ErrorCode.HEADERS_TOO_LARGE: 431, ErrorCode.REQUEST_TIMEOUT: 408,
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: 415, ErrorCode.UNAUTHORIZED: 401, ErrorCode.FORBIDDEN: 403,
    ErrorCode.SHUTTING_DOWN: 503, ErrorCode.SESSION_BUSY: 409, ErrorCode.SESSION_MOVED: 503,
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
                   ErrorCode.GENERATION_RESTARTED, ErrorCode.EXPORT_FAILED, ErrorCode.SHUTTING_DOWN,
                   ErrorCode.SESSION_MOVED, ErrorCode.STORE_UNAVAILABLE)
    assert body["error"]["type"] == ("server_error" if code in server_side
                                     else "upstream_error" if code.value.startswith("upstream")
                                     and code is not ErrorCode.UPSTREAM_REJECTED
                                     else "invalid_request_error")
    assert "request_id" not in body["error"]  # outside an HTTP exchange


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


def test_the_fleets_errors_say_when_to_retry() -> None:
    busy = error_mapping.api_error_for(SessionBusyError("s", "host:1:2", 2.5))
    assert (dict(busy.headers), busy.to_json()["error"]["retry_after"]) == ({"Retry-After": "3"}, 3)
    assert "host:1:2" not in busy.message
    moved = error_mapping.api_error_for(LeaseLostError("s", 3))
    assert (dict(moved.headers), moved.to_json()["error"]["retry_after"]) == ({"Retry-After": "1"}, 1)


def test_a_known_code_has_the_tables_status_and_type_only() -> None:
    for status in (400, 503, 504):
        with pytest.raises(ValueError, match="ERROR_TABLE"):
            ApiError(status, "upstream_unavailable", "x")
    with pytest.raises(ValueError, match="ERROR_TABLE"):
        ApiError(400, "invalid_request", "x", type="server_error")
    assert ApiError(502, "upstream_unavailable", "x").type == "upstream_error"
    # A code the table does not know keeps the status it is given (the rare case; no producer of the proxy does it).
    assert (ApiError(418, "teapot", "x").status, ApiError(418, "teapot", "x").type) == (418, "invalid_request_error")


def test_the_body_carries_the_exchanges_request_id_after_the_standard_members() -> None:
    token = current_request_id_var.set("req_0123456789abcdef0123456789abcdef")
    try:
        body = ApiError.context_overflow(10, 8).to_json()["error"]
    finally:
        current_request_id_var.reset(token)
    assert list(body)[:5] == ["message", "type", "param", "code", "request_id"]
    assert body["request_id"] == "req_0123456789abcdef0123456789abcdef" and body["prompt_tokens"] == 10


@pytest.mark.parametrize(
    "text",
    [
        "cannot connect to http://127.0.0.1:30000/generate", "connect to 10.0.0.7 failed", "sglang-worker-3:30000",
        "localhost refused", "ValueError: bad", "ConnectionRefusedError", "[Errno 111] Connection refused",
        'Traceback (most recent call last):\n  File "x.py", line 1', "error in /opt/sglang/srt/managers/io.py",
        "", "   ", None, 42,
    ],
)
def test_client_safe_text_refuses_anything_that_looks_internal(text: object) -> None:
    assert client_safe_text(text) is None


def test_client_safe_text_quotes_a_plain_reason_first_line_truncated() -> None:
    reason = "The input (5000 tokens) is longer than the model's context length (4096 tokens)."
    assert client_safe_text(reason + "\nsecond line") == reason
    assert client_safe_text("x" * 400, limit=50) == "x" * 47 + "..."


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
     (415, "invalid_request"), (500, "internal_error"), (503, "internal_error"), (302, "internal_error")],
)
def test_http_errors_map_werkzeug_exceptions_onto_codes_with_the_tables_status(status: int, code: str) -> None:
    error = error_mapping.http_error(status, "description")
    assert (error.code, error.status) == (code, ERROR_TABLE[ErrorCode(code)].status)
    assert error.message == ("internal error" if code == "internal_error" else "description")


@pytest.mark.parametrize(
    ("exc", "status", "code"),
    [
        (session_errors.SessionFinalizedError("gone"), 400, "session_finalized"),
        (session_errors.MaxStepsExceededError(10, 10, 0), 400, "max_steps_exceeded"),
        (session_errors.ResponseMaskMismatchError(expected=4, got=2), 422, "response_mask_mismatch"),
        (session_errors.InvalidMessagesError("none"), 400, "invalid_messages"),
        (session_errors.SessionAbortedError("aborted"), 409, "session_aborted"),
        (session_errors.ExportFailedError("s1", 3, "OSError"), 500, "export_failed"),
    ],
)
def test_session_errors_keep_the_session_layers_code_and_status(exc: Exception, status: int, code: str) -> None:
    error = error_mapping.api_error_for(exc)
    assert (error.status, error.code, error.message) == (status, code, str(exc))
    assert exc.http_status == status  # the session layer reads the same table
    assert "OSError" not in error.message
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
