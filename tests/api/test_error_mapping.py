"""The one mapping of internal errors onto API answers (``proxy/api/error_mapping.py``): every kind of error a
request can meet gets its code from there and its status from the table, and no answer carries internals."""

from __future__ import annotations

import logging

import pytest
from werkzeug.exceptions import NotFound, RequestEntityTooLarge

from proxy.api import error_mapping
from proxy.api.errors import ERROR_TABLE, ApiError, ErrorCode
from proxy.trajectory import session_errors
from proxy.tokenization import TitoError
from proxy.tokenization.results import TitoFailureReason
from proxy.upstream.errors import (
    UpstreamErrorChunk,
    UpstreamHTTPError,
    UpstreamProtocolError,
    UpstreamStreamCut,
    UpstreamTimeout,
    UpstreamUnavailable,
)

INTERNAL_URL = "http://10.1.2.3:30000/generate"

CASES = [
    (session_errors.SessionFinalizedError("the session was finalized"), ErrorCode.SESSION_FINALIZED),
    (session_errors.ResponseMaskMismatchError(expected=3, got=1), ErrorCode.RESPONSE_MASK_MISMATCH),
    (TitoError.of(next(iter(TitoFailureReason)), f"jinja said no at {INTERNAL_URL}"), ErrorCode.INVALID_REQUEST),
    (UpstreamUnavailable("connection refused", url=INTERNAL_URL), ErrorCode.UPSTREAM_UNAVAILABLE),
    (UpstreamTimeout("too slow", phase="connect", url=INTERNAL_URL), ErrorCode.UPSTREAM_UNAVAILABLE),
    (UpstreamStreamCut("cut", url=INTERNAL_URL), ErrorCode.UPSTREAM_UNAVAILABLE),
    (UpstreamHTTPError(503, "busy", url=INTERNAL_URL), ErrorCode.UPSTREAM_OVERLOADED),
    (UpstreamHTTPError(404, "no route", url=INTERNAL_URL), ErrorCode.UPSTREAM_ERROR),
    (UpstreamErrorChunk(404, "refused in the stream", url=INTERNAL_URL), ErrorCode.UPSTREAM_REJECTED),
    (UpstreamProtocolError("no meta_info", url=INTERNAL_URL), ErrorCode.UPSTREAM_PROTOCOL_ERROR),
    (NotFound(), ErrorCode.NOT_FOUND),
    (RequestEntityTooLarge(), ErrorCode.REQUEST_TOO_LARGE),
    (KeyError(f"bug near {INTERNAL_URL}"), ErrorCode.INTERNAL_ERROR),
]


@pytest.mark.parametrize(("error", "code"), CASES, ids=[type(error).__name__ for error, _ in CASES])
def test_every_kind_of_internal_error_gets_its_code_and_the_tables_status(error, code, caplog) -> None:
    caplog.set_level(logging.INFO)
    answer = error_mapping.api_error_for(error)
    assert (answer.code, answer.status, answer.type) == (code, ERROR_TABLE[code].status, ERROR_TABLE[code].type)
    body = answer.to_body().decode()
    assert "10.1.2.3" not in body and "Traceback" not in body and type(error).__name__ not in body


def test_an_api_error_is_its_own_answer() -> None:
    error = ApiError.invalid_request("bad field", "temperature")
    assert error_mapping.api_error_for(error) is error


def test_the_detail_a_body_leaves_out_goes_to_the_log(caplog) -> None:
    caplog.set_level(logging.INFO)
    error_mapping.api_error_for(UpstreamUnavailable("connection refused", url=INTERNAL_URL))
    error_mapping.api_error_for(KeyError("a bug"))
    logged = caplog.text
    assert INTERNAL_URL in logged and "KeyError" in logged


def test_an_upstream_refusal_quotes_sglangs_reason_only_without_internals() -> None:
    quoted = error_mapping.upstream_error(UpstreamHTTPError(400, "The input is longer than the context."))
    assert quoted.message.endswith(": The input is longer than the context.")
    hidden = error_mapping.upstream_error(UpstreamHTTPError(400, f"ValueError at {INTERNAL_URL}"))
    assert "10.1.2.3" not in hidden.message and "ValueError" not in hidden.message


def test_every_session_layer_error_names_a_code_of_the_table() -> None:
    # A session error with a code the table does not know would be answered invalid_request silently: refuse it here.
    classes = [cls for cls in vars(session_errors).values()
               if isinstance(cls, type) and issubclass(cls, session_errors.SessionError)
               and cls is not session_errors.SessionError]
    assert classes
    for cls in classes:
        assert ErrorCode(cls.code) in ERROR_TABLE, cls
