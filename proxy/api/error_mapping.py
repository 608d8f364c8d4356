"""Every internal error a request can meet, mapped once onto the error the API answers.

:func:`api_error_for` is the one translation: the app's error handler (``proxy/app.py``), the generation
controller's prepare refusals and its upstream failures all call it (or :func:`upstream_error`, its upstream
branch). It picks the stable ``code`` and the client's message; the status and OpenAI ``type`` are always the code's
row of :data:`~proxy.api.errors.ERROR_TABLE`, decided nowhere else.

| internal error | code |
|---|---|
| :class:`~proxy.api.errors.ApiError` | itself (already an answer) |
| :class:`CodedError` (the session layer's errors, ``proxy/trajectory/session_errors.py``; the fleet's ``SessionBusyError`` and ``LeaseLostError``) | the code it names; ``response_mask_mismatch`` keeps ``expected`` / ``got``; one with a ``retry_after`` answers ``Retry-After`` |
| :class:`~proxy.tokenization.TitoError` (the chat template refused the messages) | ``invalid_request``, ``param`` ``messages`` |
| :class:`~proxy.upstream.errors.UpstreamError` | the upstream table below |
| werkzeug's ``HTTPException`` (unknown route, wrong method, body over the limit) | 404 ``not_found``, 405 ``method_not_allowed``, 413 ``request_too_large``; any other 4xx ``invalid_request``, anything else ``internal_error`` |
| anything else (a bug) | ``internal_error``, logged with its traceback |

Upstream failures (also the parser backend's):

| upstream | code (status) |
|---|---|
| connection refused, reset before an answer, DNS, a connect / write / pool timeout, a stream cut without ``[DONE]`` | ``upstream_unavailable`` (502) |
| HTTP 408, 429, 503, or an error abort with one of them (busy: retry later) | ``upstream_overloaded`` (503) |
| HTTP 400, 413, 422, an in-stream 4xx error chunk, a 4xx error abort (the request was refused: not retried) | ``upstream_rejected`` (400) |
| any other error status (5xx; 401/403/404: a misconfigured gateway), a 5xx error chunk or abort, a malformed stream, a stream ended without a final event | ``upstream_error`` (502) |
| an answer that breaks the protocol: not JSON, no ``meta_info`` or ``output_ids``, a token id outside the vocabulary, logprobs not one per id or not matching the ids, an unknown finish reason, a malformed HTTP response | ``upstream_protocol_error`` (502) |

A message a client sees names the failure, never an upstream URL, host or port, an exception's text or a traceback;
SGLang's reason for a refusal is quoted only when :func:`~proxy.api.errors.client_safe_text` allows it. The whole
detail is logged with the request id the error body carries.

Why a base class (:class:`CodedError`) rather than importing the session layer's errors: the session layer sits
above the API's shapes and already reads this package's table; naming its errors here would draw an arrow back up.
"""

from __future__ import annotations

import logging
import math
from typing import ClassVar

from werkzeug.exceptions import HTTPException

from proxy.api.errors import ApiError, ErrorCode, client_safe_text
from proxy.request_id import current_request_id
from proxy.tokenization import TitoError
from proxy.upstream.errors import (
    UpstreamError,
    UpstreamErrorChunk,
    UpstreamHTTPError,
    UpstreamProtocolError,
    UpstreamStreamCut,
    UpstreamTimeout,
    UpstreamUnavailable,
)

log = logging.getLogger("dressage_proxy")
upstream_log = logging.getLogger("dressage_proxy.upstream")

#: upstream statuses that mean "busy, retry later"
_RETRY_LATER = frozenset({408, 429, 503})
#: upstream statuses that mean "this request is invalid" (SGLang: 400 for a ValueError, 422 for a body FastAPI
#: refuses; a gateway: 413 for a body over its limit); any other 4xx is the gateway's configuration, not the input
_REFUSED = frozenset({400, 413, 422})
#: werkzeug HTTPException statuses with a code of their own; any other 4xx is invalid_request, the rest internal_error
_CODE_BY_HTTP_STATUS = {404: ErrorCode.NOT_FOUND, 405: ErrorCode.METHOD_NOT_ALLOWED, 413: ErrorCode.REQUEST_TOO_LARGE}


class CodedError(Exception):
    """An inner layer's error that names its stable API ``code``; its message is written for the client."""

    code: ClassVar[str] = ErrorCode.INVALID_REQUEST.value
    #: seconds after which a retry may succeed: answered as the ``Retry-After`` header and the ``retry_after`` member
    #: (rounded up, at least 1); None: no such header
    retry_after: float | None = None


def api_error_for(error: BaseException) -> ApiError:
    """The answer to ``error``, whatever layer raised it (the table in the module docstring)."""
    if isinstance(error, ApiError):
        return error
    if isinstance(error, CodedError):
        return coded_error(error)
    if isinstance(error, TitoError):
        # The chat template refused the conversation (a full encode has no fallback): the input is at fault.
        log.info("request %s: the chat template cannot render the messages: %s", current_request_id(), error)
        return ApiError.chat_template_refused(error.failure.reason.value)
    if isinstance(error, UpstreamError):
        return upstream_error(error)
    if isinstance(error, HTTPException):
        return http_error(error.code or 400, error.description or error.name)
    log.error("request %s: unexpected error, answered 500", current_request_id(), exc_info=error)
    return ApiError.internal_error()


def coded_error(error: CodedError) -> ApiError:
    """A session-layer error: the code it names (an unknown one is ``invalid_request``), its message."""
    try:
        code = ErrorCode(error.code)
    except ValueError:
        code = ErrorCode.INVALID_REQUEST
    details = {}
    if code == ErrorCode.RESPONSE_MASK_MISMATCH:
        details = {key: getattr(error, key) for key in ("expected", "got") if hasattr(error, key)}
    headers = {}
    if error.retry_after is not None:
        retry_after = max(1, math.ceil(error.retry_after)) if math.isfinite(error.retry_after) else 1
        headers, details = {"Retry-After": str(retry_after)}, {**details, "retry_after": retry_after}
    answer = ApiError.of(code, str(error), "response_mask" if code == ErrorCode.RESPONSE_MASK_MISMATCH and details
                         else None, details=details, headers=headers)
    if answer.status >= 500:
        # A fault, unless the client is told when to retry (a fleet's session_moved): then it is an event.
        level = logging.INFO if error.retry_after is not None else logging.ERROR
        log.log(level, "request %s: answered %d %s: %s", current_request_id(), answer.status, answer.code, error,
                extra={"status": answer.status, "code": str(answer.code)})
    return answer


def http_error(status: int, description: str | None = None) -> ApiError:
    """A werkzeug ``HTTPException``'s status and description as an API error."""
    code = _CODE_BY_HTTP_STATUS.get(status)
    if code is None:
        code = ErrorCode.INVALID_REQUEST if 400 <= status <= 499 else ErrorCode.INTERNAL_ERROR
    if code is ErrorCode.INTERNAL_ERROR:
        description = None  # werkzeug's 5xx descriptions are not for clients
    return ApiError.of(code, description or code.value.replace("_", " "))


def upstream_error(error: UpstreamError) -> ApiError:
    """An upstream (or parser-backend) failure's answer; the detail (URL, exception text, SGLang's message) is
    logged with the request id."""
    if isinstance(error, UpstreamProtocolError):
        # The proxy's own words about what broke (never the URL): the session stays as before, the client may retry.
        code = ErrorCode.UPSTREAM_PROTOCOL_ERROR
        message = f"SGLang's answer broke the protocol: {describe_upstream_error(error)}"
    elif isinstance(error, UpstreamHTTPError):
        # In a stream, only SGLang itself speaks: any 4xx chunk is its refusal; an HTTP 401/404 may be a gateway's.
        in_stream = isinstance(error, UpstreamErrorChunk)
        what = f"an error chunk {error.status}" if in_stream else f"HTTP {error.status}"
        code, message = upstream_status(error.status, what, error.message, any_4xx_refuses=in_stream)
    elif isinstance(error, UpstreamTimeout):
        code = ErrorCode.UPSTREAM_UNAVAILABLE
        message = f"the upstream SGLang server did not answer in time ({error.phase} timeout)"
    elif isinstance(error, UpstreamStreamCut):
        code = ErrorCode.UPSTREAM_UNAVAILABLE
        message = "upstream stream cut: SGLang's stream ended before the generation finished"
    elif isinstance(error, UpstreamUnavailable):
        code, message = ErrorCode.UPSTREAM_UNAVAILABLE, "the upstream SGLang server cannot be reached"
    else:
        code, message = ErrorCode.UPSTREAM_ERROR, "the upstream SGLang server sent an answer the proxy cannot use"
    return upstream_failure(code, message, f"{type(error).__name__}: {error}")


def upstream_status(status: int, what: str, reason: str | None, *, any_4xx_refuses: bool) -> tuple[ErrorCode, str]:
    """The code and client message of an upstream error status (an answer, an error chunk or an error abort)."""
    if status in _RETRY_LATER:
        return ErrorCode.UPSTREAM_OVERLOADED, f"the upstream SGLang server is busy ({what}); retry later"
    if status in _REFUSED or (any_4xx_refuses and 400 <= status < 500):
        quoted = client_safe_text(reason)
        message = f"the upstream SGLang server refused the request ({what})"
        return ErrorCode.UPSTREAM_REJECTED, f"{message}: {quoted}" if quoted else message
    return ErrorCode.UPSTREAM_ERROR, f"the upstream SGLang server failed ({what})"


def upstream_failure(code: ErrorCode, message: str, detail: str) -> ApiError:
    """The answer to an upstream failure; ``detail`` (for the operator only) goes to the log under the request id."""
    answer = ApiError.of(code, message)
    upstream_log.warning("request %s: upstream failure answered %d %s: %s", current_request_id() or "-",
                         answer.status, code, detail, extra={"status": answer.status, "code": str(code)})
    return answer


def describe_upstream_error(error: UpstreamError) -> str:
    """What went wrong, for the client: the error's message (with the HTTP status, and how many tokens had arrived),
    never the upstream's URL."""
    text = error.message
    if isinstance(error, UpstreamHTTPError):
        text = f"HTTP {error.status}: {text}"
    if error.partial is not None and error.partial.output_ids:
        text += f" (after {len(error.partial.output_ids)} tokens)"
    return text


__all__ = [
    "CodedError", "api_error_for", "coded_error", "describe_upstream_error", "http_error", "upstream_error",
    "upstream_failure", "upstream_status",
]
