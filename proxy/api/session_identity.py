"""Who a chat request belongs to: its session id, and its optional instance and turn ids, read from the request
headers and body.

Session identity (spec 3.1). Header names are matched case-insensitively; blank values count as absent.

| field | from | rule |
|---|---|---|
| ``session_id`` | the :class:`SessionIdSources`: by default the ``X-Session-Id`` header, else body ``session_id``, else the ``X-SMG-Routing-Key`` header | required: ``missing_session_id`` (400, ``param`` the first header) |
| ``instance_id`` | ``X-Instance-Id`` header, else body ``instance_id`` | optional |
| ``turn_id`` | ``X-Turn-Id`` header, else body ``turn_id`` | optional |

Ids are strings (or integers, turned into strings) of 1-256 printable ASCII characters (see :mod:`proxy.api.fields`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from proxy.api.errors import DEFAULT_SESSION_ID_HEADERS, ApiError
from proxy.api.fields import identifier, optional_identifier

#: the headers read here, lower-cased (as :func:`header_map` keys them); the routing key is the gateway's
ROUTING_KEY_HEADER = "x-smg-routing-key"
INSTANCE_HEADER = "x-instance-id"
TURN_HEADER = "x-turn-id"


@attrs.frozen
class SessionIdSources:
    """Where a request's session id is read, in precedence order: each of ``headers``, then the body field
    ``body_field`` (None: never), then the gateway's ``X-SMG-Routing-Key`` header. The proxy's
    ``--session-id-header`` (repeatable) and ``--session-id-body-field`` set them; the default is spec 3.1's order.
    An operator whose agents send their own ``X-Session-Id`` puts its own header first."""

    headers: tuple[str, ...] = attrs.field(default=DEFAULT_SESSION_ID_HEADERS, converter=tuple)
    body_field: str | None = "session_id"

    def __attrs_post_init__(self) -> None:
        if not self.headers:
            raise ValueError("a session id needs at least one header to be read from")


DEFAULT_SESSION_ID_SOURCES = SessionIdSources()


def header_map(headers: Mapping[str, str] | Any) -> dict[str, str]:
    """The headers by lower-cased name (first value wins); works for dicts and werkzeug ``Headers``."""
    out: dict[str, str] = {}
    items: Iterable[Any] = headers.items() if hasattr(headers, "items") else headers or ()
    for pair in items:
        if isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str) and isinstance(pair[1], str):
            value = pair[1].strip()
            if value:
                out.setdefault(pair[0].lower(), value)
    return out


def read_session_id(body: dict[str, Any], header: Mapping[str, str], sources: SessionIdSources) -> tuple[str, str]:
    """The first session id of ``sources`` present (a blank header counts as absent), and where it came from."""
    for name in sources.headers:
        if name.lower() in header:
            return identifier(header[name.lower()], name), "header"
    if sources.body_field is not None:
        value = body.get(sources.body_field)
        if value is not None and value != "":
            return identifier(value, sources.body_field), "body"
    if ROUTING_KEY_HEADER in header:
        return identifier(header[ROUTING_KEY_HEADER], "X-SMG-Routing-Key"), "routing_key"
    raise ApiError.missing_session_id(sources.headers, sources.body_field)


def read_optional_id(body: dict[str, Any], header: Mapping[str, str], header_name: str, key: str) -> str | None:
    """The id in header ``header_name`` (of :func:`header_map`), else in body field ``key``; None when neither."""
    if header_name in header:
        return identifier(header[header_name], "-".join(part.capitalize() for part in header_name.split("-")))
    return optional_identifier(body, key)


__all__ = [
    "DEFAULT_SESSION_ID_SOURCES", "INSTANCE_HEADER", "ROUTING_KEY_HEADER", "TURN_HEADER", "SessionIdSources",
    "header_map", "read_optional_id", "read_session_id",
]
