"""The errors the HTTP API answers, in the OpenAI error shape, each with a stable ``code``.

Every failure a client can see is an :class:`ApiError`: an HTTP status, a stable ``code`` (an :class:`ErrorCode`),
a human message, the ``param`` it is about (a dotted path such as ``messages[2].tool_calls[0].function.name``, or
``None``), and an OpenAI error ``type``. Its body is always::

    {"error": {"message": "...", "type": "...", "param": "..." | null, "code": "...", "request_id": "req_..."}}

plus, for a few codes, extra members inside ``"error"`` (``details``); the OpenAI SDKs ignore members they do not
know. ``request_id`` is the exchange's id (:mod:`proxy.request_id`), also sent as the ``X-Request-Id`` header of
every response; it is absent only outside an HTTP exchange (unit tests). Some codes also carry response headers
(``Retry-After``).

**One table.** :data:`ERROR_TABLE` maps every code to its HTTP status, OpenAI ``type`` and description; it is the
only place a status is decided. Every producer names a code and gets status and type from here:
``ApiError.of(code, message)`` and the named classmethods, the generation controller's answers to its machine's
``RespondError``, and the one mapping of internal errors (session layer, chat template, upstream, werkzeug) onto
codes, ``proxy/api/error_mapping.py:api_error_for``. The constructor refuses a known code with another status or
type. ``docs/api.md``'s error table is this table
rendered by :func:`error_table_markdown` (``tests/api/test_error_table.py`` compares the two row by row and
prints the rendered table when they differ). Adding a code: one :class:`ErrorCode` member, one
:data:`ERROR_TABLE` entry, the docs table regenerated.

**No internals in a body.** Messages are written for the client: never an upstream URL, host or port, an
exception's text or class name, or a traceback. The detail goes to the log, with the request id the body carries.
:func:`client_safe_text` decides whether a text from elsewhere (SGLang's reason for refusing a request) may be
quoted.

Why 400 rather than 409 for the session-state codes (``trajectory_version_changed``, ``session_finalized``,
``max_steps_exceeded``): the OpenAI SDKs retry 408, 409, 429 and 5xx by default, and none of these clears on a
retry, so a 4xx the SDKs do not retry is the honest answer. ``paused_timeout`` is a 503 precisely because a retry
after ``Retry-After`` is the right reaction (the SDKs honour that header). The upstream codes: see
``docs/request-path.md`` (errors) for why a refusal is 400 and a failure 502.

This module is pure: it builds dicts, bytes and header maps, and the app turns them into a response.
"""

from __future__ import annotations

import enum
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from proxy.request_id import current_request_id


class ErrorCode(enum.StrEnum):
    """The stable ``error.code`` values (status, type and meaning: :data:`ERROR_TABLE`)."""

    # -- the request itself
    MISSING_SESSION_ID = "missing_session_id"
    INVALID_REQUEST = "invalid_request"
    UNSUPPORTED_PARAMETER = "unsupported_parameter"
    CONTEXT_OVERFLOW = "context_overflow"
    TOO_MANY_MESSAGES = "too_many_messages"
    # -- the session layer
    TRAJECTORY_VERSION_CHANGED = "trajectory_version_changed"
    MAX_STEPS_EXCEEDED = "max_steps_exceeded"
    SESSION_FINALIZED = "session_finalized"
    INVALID_MESSAGES = "invalid_messages"
    SESSION_ABORTED = "session_aborted"
    EXPORT_FAILED = "export_failed"
    STORE_UNAVAILABLE = "store_unavailable"
    RESPONSE_MASK_MISMATCH = "response_mask_mismatch"
    # -- the rollout gate
    RESUME_REFUSED = "resume_refused"
    INVALID_IDEMPOTENCY_KEY = "invalid_idempotency_key"
    IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
    PAUSED_TIMEOUT = "paused_timeout"
    GENERATION_RESTARTED = "generation_restarted"
    # -- the upstream (SGLang and its parser endpoints)
    UPSTREAM_UNAVAILABLE = "upstream_unavailable"
    UPSTREAM_OVERLOADED = "upstream_overloaded"
    UPSTREAM_REJECTED = "upstream_rejected"
    UPSTREAM_ERROR = "upstream_error"
    UPSTREAM_ABORTED = "upstream_aborted"
    UPSTREAM_PROTOCOL_ERROR = "upstream_protocol_error"
    WEIGHT_VERSION_CHANGED = "weight_version_changed"
    # -- the fleet (several proxies sharing one store)
    SESSION_BUSY = "session_busy"
    SESSION_MOVED = "session_moved"
    # -- routing and the server
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    REQUEST_TOO_LARGE = "request_too_large"
    HEADERS_TOO_LARGE = "headers_too_large"
    REQUEST_TIMEOUT = "request_timeout"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    # -- access and the service's life
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    SHUTTING_DOWN = "shutting_down"
    INTERNAL_ERROR = "internal_error"


INVALID_REQUEST_ERROR = "invalid_request_error"
SERVER_ERROR = "server_error"
UPSTREAM_ERROR_TYPE = "upstream_error"


class ErrorSpec(NamedTuple):
    """One row of the table: what a code answers. ``description`` is Markdown (it is docs/api.md's column)."""

    status: int
    type: str
    description: str


#: code -> (HTTP status, OpenAI error type, description): the one source of every status. Rows in docs order.
ERROR_TABLE: Mapping[ErrorCode, ErrorSpec] = {
    ErrorCode.MISSING_SESSION_ID: ErrorSpec(
        400, INVALID_REQUEST_ERROR,
        "no session id: none of the `--session-id-header` headers (default `X-Session-Id`), no body field "
        "`--session-id-body-field` (default `session_id`), no `X-SMG-Routing-Key` header; `param` names the first "
        "header",
    ),
    ErrorCode.INVALID_REQUEST: ErrorSpec(
        400, INVALID_REQUEST_ERROR,
        "a field has the wrong type or value (`param` names it); body not JSON or not a JSON object; a string or key "
        "anywhere in the body that is not valid Unicode (a lone surrogate such as `\"\\ud800\"`; `param` is its "
        "path); the chat template cannot render the messages (`param` `messages`)",
    ),
    ErrorCode.UNSUPPORTED_PARAMETER: ErrorSpec(
        400, INVALID_REQUEST_ERROR,
        "valid OpenAI input this proxy does not serve: `n` > 16, image/audio content, custom tools, `functions`, a "
        "non-default `audio`, `modalities`, `prediction`, `web_search_options`, `service_tier`, `store`, "
        "`verbosity`, `stream_options.continuous_usage_stats`",
    ),
    ErrorCode.CONTEXT_OVERFLOW: ErrorSpec(
        400, INVALID_REQUEST_ERROR,
        "the prompt already fills `--context-window`; extra members `prompt_tokens`, `context_window`",
    ),
    ErrorCode.TOO_MANY_MESSAGES: ErrorSpec(
        400, INVALID_REQUEST_ERROR,
        "more messages (or input items) than `--max-messages` in one request; extra members `limit`, `got`",
    ),
    ErrorCode.TRAJECTORY_VERSION_CHANGED: ErrorSpec(
        400, INVALID_REQUEST_ERROR,
        "without partial rollout, the session's weight version or rollout epoch changed between its steps: refused "
        "before generating (a pause/resume came between the steps) or at commit (SGLang's weights were relabelled "
        "outside a pause); nothing recorded",
    ),
    ErrorCode.MAX_STEPS_EXCEEDED: ErrorSpec(
        400, INVALID_REQUEST_ERROR,
        "the session holds `DRESSAGE_PROXY_MAX_STEPS_PER_SESSION` steps (it is not finalized automatically)",
    ),
    ErrorCode.SESSION_FINALIZED: ErrorSpec(
        400, INVALID_REQUEST_ERROR,
        "the session is finalizing or finalized; a late generation is not committed",
    ),
    ErrorCode.INVALID_MESSAGES: ErrorSpec(
        400, INVALID_REQUEST_ERROR,
        "(session layer) the messages cannot be trie edges; the API's own validation normally answers first",
    ),
    ErrorCode.SESSION_ABORTED: ErrorSpec(
        409, INVALID_REQUEST_ERROR,
        "finalize of a session that was aborted: nothing to export",
    ),
    ErrorCode.EXPORT_FAILED: ErrorSpec(
        500, SERVER_ERROR,
        "finalize could not build or store the session's segments: a bug (logged with the session id, counted in "
        "`/trajectory/stats`); the session keeps every committed step and the next finalize retries the export",
    ),
    ErrorCode.STORE_UNAVAILABLE: ErrorSpec(
        503, SERVER_ERROR,
        "the step was committed but the trajectory store could not make it durable (store down, disk full): logged "
        "with the session id; the step is kept and journaled by the session's next commit, or exported by finalize",
    ),
    ErrorCode.RESPONSE_MASK_MISMATCH: ErrorSpec(
        422, INVALID_REQUEST_ERROR,
        "`response_mask` length differs from the context tokens the step adds; extra members `expected`, `got`",
    ),
    ErrorCode.RESUME_REFUSED: ErrorSpec(
        409, INVALID_REQUEST_ERROR,
        "`POST /v1/rollout/resume` while a pause is in progress, or announcing a new version while running",
    ),
    ErrorCode.INVALID_IDEMPOTENCY_KEY: ErrorSpec(
        400, INVALID_REQUEST_ERROR,
        "the `Idempotency-Key` header is empty, longer than 255 characters, not printable ASCII, a malformed quoted "
        "string, or sent twice",
    ),
    ErrorCode.IDEMPOTENCY_KEY_REUSED: ErrorSpec(
        422, INVALID_REQUEST_ERROR,
        "the session already used this `Idempotency-Key` for a different request (another canonical body), "
        "recorded or still running; nothing runs",
    ),
    ErrorCode.PAUSED_TIMEOUT: ErrorSpec(
        503, SERVER_ERROR,
        "the rollout gate stayed paused longer than `--pause-wait-timeout`; `Retry-After` header, extra member "
        "`retry_after`",
    ),
    ErrorCode.GENERATION_RESTARTED: ErrorSpec(
        503, SERVER_ERROR,
        "**SSE error event only** (the stream had started with 200): without partial rollout, a streamed "
        "generation interrupted by a pause restarts from scratch, so the tokens already sent are void; retry the "
        "request",
    ),
    ErrorCode.UPSTREAM_UNAVAILABLE: ErrorSpec(
        502, UPSTREAM_ERROR_TYPE,
        "SGLang cannot be reached or dropped the request: connection refused or reset, DNS failure, a connect "
        "(`--upstream-connect-timeout`), write or pool timeout, silence past `--upstream-read-timeout`, a stream cut "
        "before its end",
    ),
    ErrorCode.UPSTREAM_OVERLOADED: ErrorSpec(
        503, UPSTREAM_ERROR_TYPE,
        "SGLang (or its gateway) answered \"busy, retry later\": HTTP 408, 429 or 503, as an answer or an error "
        "abort",
    ),
    ErrorCode.UPSTREAM_REJECTED: ErrorSpec(
        400, INVALID_REQUEST_ERROR,
        "SGLang refused the request as invalid: HTTP 400, 413 or 422, a 4xx error chunk or error abort (for "
        "example prompt + `max_tokens` beyond its context with `--no-dynamic-max-tokens`); the message quotes "
        "SGLang's reason when it holds no internals; a retry would be refused again",
    ),
    ErrorCode.UPSTREAM_ERROR: ErrorSpec(
        502, UPSTREAM_ERROR_TYPE,
        "SGLang failed: any other error status (a 5xx; a 401, 403 or 404 is a misconfigured gateway), a 5xx error "
        "chunk or error abort, a stream that ended without a final event",
    ),
    ErrorCode.UPSTREAM_ABORTED: ErrorSpec(
        502, UPSTREAM_ERROR_TYPE,
        "SGLang aborted a request the proxy did not ask to abort (for example an engine-side `/pause_generation` "
        "in abort mode while the proxy was running: pause the proxy first)",
    ),
    ErrorCode.UPSTREAM_PROTOCOL_ERROR: ErrorSpec(
        502, UPSTREAM_ERROR_TYPE,
        "SGLang's answer broke its protocol (not JSON, a missing field, a token id outside the vocabulary, logprobs "
        "not matching the ids); nothing was committed and the session stays as it was",
    ),
    ErrorCode.WEIGHT_VERSION_CHANGED: ErrorSpec(
        502, SERVER_ERROR,
        "SGLang's weights changed under one running upstream request (not through the proxy's pause): the step "
        "would mix versions; nothing recorded",
    ),
    ErrorCode.SESSION_BUSY: ErrorSpec(
        409, INVALID_REQUEST_ERROR,
        "fleet mode: another proxy of the fleet holds the session's lease and kept it past the wait (the balancer "
        "sent the session elsewhere while its owner is alive and busy); `Retry-After` header, extra member "
        "`retry_after`",
    ),
    ErrorCode.SESSION_MOVED: ErrorSpec(
        503, SERVER_ERROR,
        "fleet mode: another proxy took the session's lease while this one generated; nothing of this step was "
        "recorded; `Retry-After: 1`, retry (the request reaches the session's owner)",
    ),
    ErrorCode.NOT_FOUND: ErrorSpec(
        404, INVALID_REQUEST_ERROR,
        "unknown route; `/trajectory/read` or `/session/<id>` of an unknown id",
    ),
    ErrorCode.METHOD_NOT_ALLOWED: ErrorSpec(405, INVALID_REQUEST_ERROR, "known route, wrong HTTP method"),
    ErrorCode.REQUEST_TOO_LARGE: ErrorSpec(
        413, INVALID_REQUEST_ERROR,
        "body over `--max-body-bytes` (default 32 MiB); extra member `limit`; the connection is closed",
    ),
    ErrorCode.HEADERS_TOO_LARGE: ErrorSpec(
        431, INVALID_REQUEST_ERROR,
        "request line and headers over `--max-header-bytes` (default 64 KiB); extra member `limit`; the connection "
        "is closed",
    ),
    ErrorCode.REQUEST_TIMEOUT: ErrorSpec(
        408, INVALID_REQUEST_ERROR,
        "the client did not send the request's head within `--header-read-timeout` or its body within "
        "`--body-read-timeout`; the connection is closed",
    ),
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: ErrorSpec(
        415, INVALID_REQUEST_ERROR,
        "a POST body that is not `Content-Type: application/json` (a browser form or `text/plain` post)",
    ),
    ErrorCode.UNAUTHORIZED: ErrorSpec(
        401, INVALID_REQUEST_ERROR,
        "a missing or wrong key (`Authorization: Bearer <key>` or `x-api-key`): `--api-key` for the agent API, "
        "`--admin-key` for rollout control, trajectories and metrics (it opens the agent API too); "
        "`WWW-Authenticate` header",
    ),
    ErrorCode.FORBIDDEN: ErrorSpec(
        403, INVALID_REQUEST_ERROR,
        "a browser `Origin` that is neither the proxy's own nor listed in `--cors-origin`; a `Host` that is not a "
        "loopback name while the proxy listens on a loopback address (DNS rebinding)",
    ),
    ErrorCode.SHUTTING_DOWN: ErrorSpec(
        503, SERVER_ERROR,
        "the proxy is stopping (SIGTERM/SIGINT): a request that arrives after the stop began, or a generation "
        "still running when `--shutdown-grace` ran out (nothing of it is recorded); retry on another proxy",
    ),
    ErrorCode.INTERNAL_ERROR: ErrorSpec(
        500, SERVER_ERROR,
        "a bug; the message never leaks internals (the log has the traceback under the request id)",
    ),
}

#: the headers of a request's session id when nothing else is configured (proxy.config: --session-id-header)
DEFAULT_SESSION_ID_HEADERS = ("X-Session-Id",)
#: the gateway's routing key: the session id's last fallback (spec 3.1)
ROUTING_KEY_HEADER_NAME = "X-SMG-Routing-Key"


def status_of(code: str) -> int:
    """The HTTP status of a known code (KeyError for an unknown one)."""
    return ERROR_TABLE[ErrorCode(code)].status


def error_table_markdown() -> str:
    """:data:`ERROR_TABLE` as the Markdown table of docs/api.md's "Error codes" section."""
    lines = ["| code | HTTP | type | when |", "|---|---|---|---|"]
    for code, spec in ERROR_TABLE.items():
        lines.append(f"| `{code.value}` | {spec.status} | {spec.type} | {spec.description} |")
    return "\n".join(lines) + "\n"


# Texts that must never reach a client: a URL, an IP address, a host:port, a path to a Python file, a traceback, a
# Python exception class name (``ValueError``, ``ConnectionRefusedError``, ``httpx.ConnectError``...).
_INTERNALS = re.compile(
    r"://|\b\d{1,3}(?:\.\d{1,3}){3}\b|\blocalhost\b|\b[\w.-]+:\d{2,5}\b|\.py\b|Traceback|\bFile \""
    r"|\b[A-Z]\w*(?:Error|Exception|Exit|Interrupt)\b|\b(?:Errno|errno)\b",
)


def client_safe_text(text: object, limit: int = 300) -> str | None:
    """``text`` (its first line, at most ``limit`` characters) when it may be quoted in an error body, else None:
    never anything that looks like a URL, host, port, file path, traceback or exception class name."""
    if not isinstance(text, str):
        return None
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not line or _INTERNALS.search(line):
        return None
    return line if len(line) <= limit else line[: limit - 3].rstrip() + "..."


class ApiError(Exception):
    """An error answered to the client; ``to_json()`` is its body, ``headers`` its extra response headers.

    Instances are values in spirit: nothing mutates them after construction. A known code's status and type are
    the table's: the constructor refuses others (use :meth:`of`, which looks them up).
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
        except ValueError:
            self.code = code
            default_type = SERVER_ERROR if status >= 500 else INVALID_REQUEST_ERROR
        else:
            spec = ERROR_TABLE[self.code]
            if status != spec.status or (type is not None and type != spec.type):
                raise ValueError(f"{code} is {spec.status} {spec.type} (ERROR_TABLE), not {status} {type}")
            default_type = spec.type
        self.type = type or default_type
        # Extra members of the error object (never overriding the standard ones).
        self.details: Mapping[str, Any] = dict(details or {})
        self.headers: Mapping[str, str] = dict(headers or {})

    def __repr__(self) -> str:
        return f"ApiError({self.status}, {self.code!r}, {self.message!r}, param={self.param!r})"

    # -- rendering -----------------------------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The OpenAI error body ``{"error": {"message", "type", "param", "code", "request_id", ...details}}``
        (``request_id``: the current exchange's, when there is one)."""
        error: dict[str, Any] = {
            "message": self.message, "type": self.type, "param": self.param, "code": str(self.code),
        }
        request_id = current_request_id()
        if request_id is not None:
            error["request_id"] = request_id
        for key, value in self.details.items():
            error.setdefault(key, value)
        return {"error": error}

    def to_body(self) -> bytes:
        """``to_json()`` as UTF-8 JSON bytes, ready to be a response body."""
        return json.dumps(self.to_json(), ensure_ascii=False, separators=(",", ":"), default=str).encode()

    # -- named constructors --------------------------------------------------------------------------------------------

    @classmethod
    def of(cls, code: str, message: str, param: str | None = None, **kwargs: Any) -> ApiError:
        """An error with the status and type the table gives ``code`` (KeyError for an unknown code)."""
        spec = ERROR_TABLE[ErrorCode(code)]
        return cls(spec.status, code, message, param, spec.type, **kwargs)

    @classmethod
    def missing_session_id(
        cls, headers: Sequence[str] = DEFAULT_SESSION_ID_HEADERS, body_field: str | None = "session_id"
    ) -> ApiError:
        """No session id in any of its configured places (``headers`` in precedence order, then ``body_field``,
        then the routing key); ``param`` is the first header."""
        first, *others = headers
        alternatives = [f"the {name} header" for name in others]
        if body_field:
            alternatives.append(f"a body field {body_field}")
        alternatives.append(f"the {ROUTING_KEY_HEADER_NAME} header")
        return cls.of(
            ErrorCode.MISSING_SESSION_ID,
            f"no session id: send the {first} header (or {', or '.join(alternatives)}); it keys the recorded "
            "trajectory",
            first,
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
    def chat_template_refused(cls, reason: str) -> ApiError:
        """The chat template cannot render the messages; ``reason`` is the TITO failure reason (the template's own
        message may quote Python internals: it goes to the log, not here)."""
        return cls.invalid_request(
            f"the chat template cannot render these messages ({reason}); the proxy log has the template's message "
            "under this request id",
            "messages",
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
    def upstream_unavailable(cls, message: str) -> ApiError:
        return cls.of(ErrorCode.UPSTREAM_UNAVAILABLE, message)

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
    def too_many_messages(cls, got: int, limit: int) -> ApiError:
        return cls.of(
            ErrorCode.TOO_MANY_MESSAGES, f"the request has {got} messages; at most {limit} are accepted", "messages",
            details={"limit": limit, "got": got},
        )

    @classmethod
    def request_too_large(cls, message: str = "request body too large") -> ApiError:
        return cls.of(ErrorCode.REQUEST_TOO_LARGE, message)

    @classmethod
    def internal_error(cls, message: str = "internal error") -> ApiError:
        return cls.of(ErrorCode.INTERNAL_ERROR, message)


__all__ = [
    "ERROR_TABLE", "ApiError", "ErrorCode", "ErrorSpec", "client_safe_text", "error_table_markdown", "status_of",
]

