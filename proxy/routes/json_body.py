"""A route's JSON body: read whole, parsed and converted in one call, off the event loop when it is large.

``await read_json_body(FinalizeRequest.from_json)`` is ``FinalizeRequest.from_json(parse_json_body(body))``: the
same result and the same ``ApiError`` for a bad body. Up to ``INLINE_BODY_BYTES`` it runs inline; a larger body is
parsed, validated and converted in one worker thread behind the off-loop limiter (``proxy/controllers/off_loop.py``),
so a 10 MB body holds no other request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from quart import request

from proxy.api import parse_json_body
from proxy.controllers.off_loop import INLINE_BODY_BYTES, run_sized

T = TypeVar("T")


async def read_json_body(convert: Callable[[Any], T]) -> T:
    """``convert(parse_json_body(body))`` of the current request's body (read whole first)."""
    return await convert_json_body(await request.get_data(), convert)


async def convert_json_body(data: bytes, convert: Callable[[Any], T]) -> T:
    """``convert(parse_json_body(data))`` of a body already read (a lean route's, ``proxy/lean_http.py``)."""
    return await run_sized(len(data), INLINE_BODY_BYTES, _parse_and_convert, data, convert)


def _parse_and_convert(data: bytes, convert: Callable[[Any], T]) -> T:
    return convert(parse_json_body(data))


__all__ = ["convert_json_body", "read_json_body"]
