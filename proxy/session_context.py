"""The session an HTTP exchange serves, for its log lines (``proxy/observability/logs.py`` adds it to each line).

The request id (``proxy/request_id.py``) is known when an exchange starts; the session id only once the route has
read the request (a header or a body field, ``proxy/api/session_identity.py``), deep inside the app. A plain context
variable set there would be seen by the route's task and the tasks it starts afterwards (trio copies the context
into every task it starts: the generation driver), but not by the exchange's outer layers, which run in a parent
task whose context the route's set never reaches: the access line (``proxy/observability/exchanges.py``) is
written there, at the end of the exchange. So each exchange gets one mutable slot (:func:`bind_exchange_slot`, by
the access-log wrapper when the exchange starts): the context variable holds the slot, the copies all hold the
same slot, and :func:`set_current_session_id` fills it in for all of them.
"""

from __future__ import annotations

import contextvars


class _SessionSlot:
    """The one place an exchange's session id is written (shared by every task of the exchange)."""

    __slots__ = ("session_id",)

    def __init__(self) -> None:
        self.session_id: str | None = None


_current: contextvars.ContextVar[_SessionSlot | None] = contextvars.ContextVar("dressage_session_slot", default=None)


def bind_exchange_slot() -> contextvars.Token[_SessionSlot | None]:
    """Give the exchange this task serves an empty session slot; reset the returned token when it ends."""
    return _current.set(_SessionSlot())


def reset_exchange_slot(token: contextvars.Token[_SessionSlot | None]) -> None:
    _current.reset(token)


def set_current_session_id(session_id: str | None) -> None:
    """The exchange this task serves is about ``session_id``: every task of the exchange logs it from now on (the
    access line included). Outside an exchange (a unit test, a background task), this task and the tasks it starts
    from now on do."""
    slot = _current.get()
    if slot is None:
        slot = _SessionSlot()
        _current.set(slot)
    slot.session_id = session_id


def current_session_id() -> str | None:
    """The session of the exchange this task serves, once its route read it (None before, and outside one)."""
    slot = _current.get()
    return slot.session_id if slot is not None else None


__all__ = ["bind_exchange_slot", "current_session_id", "reset_exchange_slot", "set_current_session_id"]
