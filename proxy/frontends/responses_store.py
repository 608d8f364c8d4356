"""The response chains of ``/v1/responses``: what ``previous_response_id`` continues.

``store: true`` (the API's default) keeps, under the new response id, the conversation up to and including that
response's output, as chat messages: the previous record's conversation, the request's ``input`` and the output
items translated back (``responses_items.items_to_messages``, the very translation an echo of those items gets, so
a continuation by id and a continuation by echo reach the same checkpoint). ``instructions`` are not stored: as in
OpenAI's API, each request gives its own (the route puts them first as the system message).

A record keeps only the messages its response added and a link to its parent, so a chain of ``n`` turns holds each
message once. Records belong to the session the response was recorded in:

- a request with ``previous_response_id`` and no session id of its own continues the previous response's session;
  one whose session id names another session is refused (400 ``invalid_request``, param ``previous_response_id``:
  the chain is per session);
- records are dropped with their session: a lookup in a session that finalized, aborted or was forgotten finds
  nothing (and forgets that session's records);
- the store is bounded: at most :data:`MAX_RECORDS` ids (oldest dropped first; a dropped id can no longer be
  continued, though records linked from newer ones stay alive as their parents).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import attrs

#: response ids kept at most (across sessions)
MAX_RECORDS = 4096


@attrs.frozen(eq=False)
class StoredResponse:
    session_id: str
    parent: StoredResponse | None
    #: the chat messages this response added: its input, then its output
    messages: tuple[dict[str, Any], ...]

    def conversation(self) -> list[dict[str, Any]]:
        """Every message of the chain, oldest first (instructions excluded)."""
        parts: list[tuple[dict[str, Any], ...]] = []
        record: StoredResponse | None = self
        while record is not None:
            parts.append(record.messages)
            record = record.parent
        return [message for part in reversed(parts) for message in part]


@attrs.define
class ResponseChains:
    """Response id -> :class:`StoredResponse`, bounded, each record alive while its session is."""

    #: whether a session still holds its data (not finalized, aborted or forgotten)
    session_alive: Callable[[str], bool]
    max_records: int = MAX_RECORDS
    _records: OrderedDict[str, StoredResponse] = attrs.field(factory=OrderedDict, init=False)

    def add(self, response_id: str, record: StoredResponse) -> None:
        self._records[response_id] = record
        while len(self._records) > self.max_records:
            self._records.popitem(last=False)

    def get(self, response_id: str) -> StoredResponse | None:
        """The record, or None (never stored, dropped for the bound, or its session ended)."""
        record = self._records.get(response_id)
        if record is None:
            return None
        if not self.session_alive(record.session_id):
            self.drop_session(record.session_id)
            return None
        return record

    def drop_session(self, session_id: str) -> None:
        for key in [key for key, record in self._records.items() if record.session_id == session_id]:
            del self._records[key]

    def __len__(self) -> int:
        return len(self._records)


__all__ = ["MAX_RECORDS", "ResponseChains", "StoredResponse"]
