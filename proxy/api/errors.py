"""The errors the HTTP API answers, in the OpenAI error shape, each with a stable ``code``.

Every failure a client can see is an :class:`ApiError`: an HTTP status, a stable ``code`` (an :class:`ErrorCode`),
a human message, the ``param`` it is about (a dotted path such as ``messages[2].tool_calls[0].function.name``, or
``None``), and an OpenAI error ``type``. Its body is always::

    {"error": {"message": "...", "type": "...", "param": "..." | null, "code": "..."}}

plus, for a few codes, extra members inside ``"error"`` (``details``, listed below); the OpenAI SDKs ignore members
they do not know. Some codes also carry response headers (``Retry-After``).

| code | HTTP | type | when |
|---|---|---|---|
| ``missing_session_id`` | 400 | invalid_request_error | no ``X-Session-Id`` header, body ``session_id`` or ``X-SMG-Routing-Key`` header |
| ``invalid_request`` | 400 | invalid_request_error | a field has the wrong type or value (``param`` names it); body not a JSON object; a string (or key) anywhere in the body that is not valid Unicode (a lone surrogate such as ``"\\ud800"``; ``param`` is its path) |
| ``unsupported_parameter`` | 400 | invalid_request_error | valid OpenAI input this proxy does not serve: ``n`` > 1, image/audio content, custom tools, ``functions`` |
| ``context_overflow`` | 400 | invalid_request_error | the prompt already fills ``--context-window``; details ``prompt_tokens``, ``context_window`` |
| ``trajectory_version_changed`` | 400 | invalid_request_error | without partial rollout, the session's weight version or rollout epoch changed between its steps |
| ``max_steps_exceeded`` | 400 | invalid_request_error | the session holds ``DRESSAGE_PROXY_MAX_STEPS_PER_SESSION`` steps |
| ``session_finalized`` | 400 | invalid_request_error | the session is finalizing or finalized; a late generation is not committed |
| ``invalid_messages`` | 400 | invalid_request_error | (session layer) the messages cannot be trie edges; the API's own validation normally answers first |
| ``session_aborted`` | 409 | invalid_request_error | (session layer) finalize of a session that was aborted: nothing to export |
| ``export_failed`` | 500 | server_error | (session layer) finalize could not export or store the session (a bug, logged); its steps are kept and the next finalize retries |
| ``response_mask_mismatch`` | 422 | invalid_request_error | ``response_mask`` length differs from the context tokens the step adds; details ``expected``, ``got`` |
| ``resume_refused`` | 409 | invalid_request_error | ``/v1/rollout/resume`` while a pause is still in progress, or announcing a new weight version without a pause |
| ``upstream_unavailable`` | 502 (or 503) | upstream_error | SGLang unreachable, connection refused or reset, stream cut, timeout |
| ``upstream_error`` | 502 | upstream_error | SGLang answered with an error (an abort with a message, a 4xx/5xx body) |
| ``upstream_aborted`` | 502 | upstream_error | SGLang aborted the request although the proxy did not ask it to |
| ``upstream_protocol_error`` | 502 | upstream_error | SGLang's answer broke its protocol (not JSON, a missing field, a token id outside the vocabulary, logprobs not matching the ids); nothing was committed |
| ``weight_version_changed`` | 502 | server_error | SGLang's weights changed under one running upstream request; the step would mix versions |
| ``paused_timeout`` | 503 | server_error | the rollout gate stayed paused longer than ``--pause-wait-timeout``; ``Retry-After`` header |
| ``generation_restarted`` | 503 | server_error | (streaming, as an SSE error event) without partial rollout a pause discarded tokens the client had already received; retry the step |
| ``not_found`` | 404 | invalid_request_error | unknown route; ``/trajectory/read`` of an unknown id |
| ``method_not_allowed`` | 405 | invalid_request_error | known route, wrong HTTP method |
| ``request_too_large`` | 413 | invalid_request_error | body over the server's limit |
| ``internal_error`` | 500 | server_error | a bug; the message never leaks a traceback |

Why 400 rather than 409 for the session-state codes (``trajectory_version_changed``, ``session_finalized``,
``max_steps_exceeded``): the OpenAI SDKs retry 408, 409, 429 and 5xx by default, and none of these clears on a
retry, so a 4xx the SDKs do not retry is the honest answer. ``paused_timeout`` is a 503 precisely because a retry
after ``Retry-After`` is the right reaction (the SDKs honour that header).

Construct errors with the named classmethods (``ApiError.missing_session_id()``,
``ApiError.invalid_request(message, param)``, ``ApiError.context_overflow(prompt_tokens, window)``...), which pick
the status and type from the table; the plain constructor exists for the rare case that needs another status.
This module is pure: it builds dicts, bytes and header maps, and the app turns them into a response.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Mapping
from typing import Any


class ErrorCode(enum.StrEnum):
    """The stable ``error.code`` values (see the module docstring's table for status and meaning)."""

    MISSING_SESSION_ID = "missing_session_id"
    INVALID_REQUEST = "invalid_request"
    UNSUPPORTED_PARAMETER = "unsupported_parameter"
    CONTEXT_OVERFLOW = "context_overflow"
    TRAJECTORY_VERSION_CHANGED = "trajectory_version_changed"
    MAX_STEPS_EXCEEDED = "max_steps_exceeded"
    SESSION_FINALIZED = "session_finalized"
    INVALID_MESSAGES = "invalid_messages"
    SESSION_ABORTED = "session_aborted"
    EXPORT_FAILED = "export_failed"
    RESPONSE_MASK_MISMATCH = "response_mask_mismatch"
    RESUME_REFUSED = "resume_refused"
    UPSTREAM_UNAVAILABLE = "upstream_unavailable"
    UPSTREAM_ERROR = "upstream_error"
    UPSTREAM_ABORTED = "upstream_aborted"
    UPSTREAM_PROTOCOL_ERROR = "upstream_protocol_error"
    WEIGHT_VERSION_CHANGED = "weight_version_changed"
    PAUSED_TIMEOUT = "paused_timeout"
    GENERATION_RESTARTED = "generation_restarted"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    REQUEST_TOO_LARGE = "request_too_large"
    INTERNAL_ERROR = "internal_error"


INVALID_REQUEST_ERROR = "invalid_request_error"
SERVER_ERROR = "server_error"
UPSTREAM_ERROR_TYPE = "upstream_error"

#: code -> (default HTTP status, OpenAI error type); the table of the module docstring, as data.
ERROR_TABLE: Mapping[ErrorCode, tuple[int, str]] = {
    ErrorCode.MISSING_SESSION_ID: (400, INVALID_REQUEST_ERROR),
    ErrorCode.INVALID_REQUEST: (400, INVALID_REQUEST_ERROR),
    ErrorCode.UNSUPPORTED_PARAMETER: (400, INVALID_REQUEST_ERROR),
    ErrorCode.CONTEXT_OVERFLOW: (400, INVALID_REQUEST_ERROR),
    ErrorCode.TRAJECTORY_VERSION_CHANGED: (400, INVALID_REQUEST_ERROR),
    ErrorCode.MAX_STEPS_EXCEEDED: (400, INVALID_REQUEST_ERROR),
    ErrorCode.SESSION_FINALIZED: (400, INVALID_REQUEST_ERROR),
    ErrorCode.INVALID_MESSAGES: (400, INVALID_REQUEST_ERROR),
    ErrorCode.SESSION_ABORTED: (409, INVALID_REQUEST_ERROR),
    ErrorCode.EXPORT_FAILED: (500, SERVER_ERROR),
    ErrorCode.RESPONSE_MASK_MISMATCH: (422, INVALID_REQUEST_ERROR),
    ErrorCode.RESUME_REFUSED: (409, INVALID_REQUEST_ERROR),
    ErrorCode.UPSTREAM_UNAVAILABLE: (502, UPSTREAM_ERROR_TYPE),
    ErrorCode.UPSTREAM_ERROR: (502, UPSTREAM_ERROR_TYPE),
    ErrorCode.UPSTREAM_ABORTED: (502, UPSTREAM_ERROR_TYPE),
    ErrorCode.UPSTREAM_PROTOCOL_ERROR: (502, UPSTREAM_ERROR_TYPE),
    ErrorCode.WEIGHT_VERSION_CHANGED: (502, SERVER_ERROR),
    ErrorCode.PAUSED_TIMEOUT: (503, SERVER_ERROR),
    ErrorCode.GENERATION_RESTARTED: (503, SERVER_ERROR),
    ErrorCode.NOT_FOUND: (404, INVALID_REQUEST_ERROR),
    ErrorCode.METHOD_NOT_ALLOWED: (405, INVALID_REQUEST_ERROR),
    ErrorCode.REQUEST_TOO_LARGE: (413, INVALID_REQUEST_ERROR),
    ErrorCode.INTERNAL_ERROR: (500, SERVER_ERROR),
}

# werkzeug HTTPException statuses the app maps onto codes; anything else is invalid_request (4xx) or internal (5xx).
_CODE_BY_HTTP_STATUS = {404: ErrorCode.NOT_FOUND, 405: ErrorCode.METHOD_NOT_ALLOWED, 413: ErrorCode.REQUEST_TOO_LARGE}


class ApiError(Exception):
    """An error answered to the client; ``to_json()`` is its body, ``headers`` its extra response headers.

    Instances are values in spirit: nothing mutates them after construction.
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        param: str | None = None,
        type: str | None = None,  # noqa: A002 - the OpenAI field name
        *,
        details: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if not 400 <= status <= 599:
            raise ValueError(f"an API error needs a 4xx or 5xx status, not {status}")
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        try:
            # A known code is kept as its ErrorCode (equal to its string), an unknown one as the string.
            self.code: str = ErrorCode(code)
            default_type = ERROR_TABLE[self.code][1]
        except ValueError:
            self.code = code
            default_type = SERVER_ERROR if status >= 500 else INVALID_REQUEST_ERROR
        self.type = type or default_type
        # Extra members of the error object (never overriding the four standard ones).
        self.details: Mapping[str, Any] = dict(details or {})
        self.headers: Mapping[str, str] = dict(headers or {})

    def __repr__(self) -> str:
        return f"ApiError({self.status}, {self.code!r}, {self.message!r}, param={self.param!r})"

    # -- rendering -----------------------------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The OpenAI error body ``{"error": {"message", "type", "param", "code", ...details}}``."""
        error = {"message": self.message, "type": self.type, "param": self.param, "code": str(self.code)}
        for key, value in self.details.items():
            error.setdefault(key, value)
        return {"error": error}

    def to_body(self) -> bytes:
        """``to_json()`` as UTF-8 JSON bytes, ready to be a response body."""
        return json.dumps(self.to_json(), ensure_ascii=False, separators=(",", ":"), default=str).encode()

    # -- named constructors --------------------------------------------------------------------------------------------

    @classmethod
    def of(cls, code: ErrorCode, message: str, param: str | None = None, **kwargs: Any) -> ApiError:
        """An error with the status and type the table gives ``code``."""
        status, type_ = ERROR_TABLE[code]
        return cls(status, code, message, param, type_, **kwargs)

    @classmethod
    def missing_session_id(cls) -> ApiError:
        return cls.of(
            ErrorCode.MISSING_SESSION_ID,
            "no session id: send the X-Session-Id header (or a body field session_id, or the X-SMG-Routing-Key "
            "header); it keys the recorded trajectory",
            "X-Session-Id",
        )

    @classmethod
    def invalid_request(cls, message: str, param: str | None = None) -> ApiError:
        return cls.of(ErrorCode.INVALID_REQUEST, message, param)

    @classmethod
    def unsupported_parameter(cls, message: str, param: str | None = None) -> ApiError:
        return cls.of(ErrorCode.UNSUPPORTED_PARAMETER, message, param)

    @classmethod
    def context_overflow(cls, prompt_tokens: int, context_window: int) -> ApiError:
        return cls.of(
            ErrorCode.CONTEXT_OVERFLOW,
            f"the prompt has {prompt_tokens} tokens and the context window is {context_window}: "
            "no room left to generate",
            "messages",
            details={"prompt_tokens": prompt_tokens, "context_window": context_window},
        )

    @classmethod
    def trajectory_version_changed(cls, message: str) -> ApiError:
        return cls.of(ErrorCode.TRAJECTORY_VERSION_CHANGED, message)

    @classmethod
    def max_steps_exceeded(cls, message: str) -> ApiError:
        return cls.of(ErrorCode.MAX_STEPS_EXCEEDED, message)

    @classmethod
    def session_finalized(cls, message: str) -> ApiError:
        return cls.of(ErrorCode.SESSION_FINALIZED, message)

    @classmethod
    def response_mask_mismatch(cls, expected: int, got: int) -> ApiError:
        return cls.of(
            ErrorCode.RESPONSE_MASK_MISMATCH,
            f"response_mask has {got} entries; this step adds {expected} context tokens",
            "response_mask",
            details={"expected": expected, "got": got},
        )

    @classmethod
    def upstream_unavailable(cls, message: str, *, status: int = 502) -> ApiError:
        if status not in (502, 503, 504):
            raise ValueError(f"upstream_unavailable is a 502, 503 or 504, not {status}")
        return cls(status, ErrorCode.UPSTREAM_UNAVAILABLE, message, None, UPSTREAM_ERROR_TYPE)

    @classmethod
    def upstream_error(cls, message: str) -> ApiError:
        return cls.of(ErrorCode.UPSTREAM_ERROR, message)

    @classmethod
    def paused_timeout(cls, waited_seconds: float, retry_after_seconds: float) -> ApiError:
        retry_after = max(1, math.ceil(retry_after_seconds)) if math.isfinite(retry_after_seconds) else 1
        return cls.of(
            ErrorCode.PAUSED_TIMEOUT,
            f"generation is paused for a weight update and stayed paused for {waited_seconds:.1f} s; "
            f"retry after {retry_after} s",
            headers={"Retry-After": str(retry_after)},
            details={"retry_after": retry_after},
        )

    @classmethod
    def not_found(cls, message: str = "not found", param: str | None = None) -> ApiError:
        return cls.of(ErrorCode.NOT_FOUND, message, param)

    @classmethod
    def method_not_allowed(cls, message: str = "method not allowed") -> ApiError:
        return cls.of(ErrorCode.METHOD_NOT_ALLOWED, message)

    @classmethod
    def request_too_large(cls, message: str = "request body too large") -> ApiError:
        return cls.of(ErrorCode.REQUEST_TOO_LARGE, message)

    @classmethod
    def internal_error(cls, message: str = "internal error") -> ApiError:
        return cls.of(ErrorCode.INTERNAL_ERROR, message)

    # -- translations from other layers --------------------------------------------------------------------------------

    @classmethod
    def from_http_status(cls, status: int, description: str | None = None) -> ApiError:
        """A werkzeug ``HTTPException`` (unknown route, wrong method, body too large...) as an API error."""
        if not 400 <= status <= 599:
            status = 500
        code = _CODE_BY_HTTP_STATUS.get(status)
        if code is None:
            code = ErrorCode.INTERNAL_ERROR if status >= 500 else ErrorCode.INVALID_REQUEST
        return cls(status, code, description or code.value.replace("_", " "))

    @classmethod
    def from_session_error(cls, error: Exception) -> ApiError:
        """A ``proxy.controllers.errors.SessionError`` (read by duck typing: ``code``, ``http_status``, message)."""
        code = getattr(error, "code", ErrorCode.INVALID_REQUEST)
        status = getattr(error, "http_status", 400)
        if not isinstance(status, int) or not 400 <= status <= 599:
            status = 400
        details = {}
        if code == ErrorCode.RESPONSE_MASK_MISMATCH:
            details = {key: getattr(error, key) for key in ("expected", "got") if hasattr(error, key)}
        return cls(status, str(code), str(error), "response_mask" if details else None, details=details)


__all__ = ["ERROR_TABLE", "ApiError", "ErrorCode"]
