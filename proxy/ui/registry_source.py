"""The viewer's data from a running proxy: the session registry (live sessions, their tries, tombstones) and the
trajectory store (finalized segments, read without draining).

What each session shows, decided by the data it still holds (never by its machine's state):

- segments in the store (finalized, not drained yet): those segments, and the trie rebuilt from their messages
  (finalize freed the session's own trie);
- a trie (live, or finalizing): that trie, and a *preview* of its segments: ``export_segments`` (pure) on the
  tips of its chains (``Session.preview_export``), exactly what a finalize would export now, changing nothing;
- neither (drained, aborted, finalized with nothing to export): its statistics only.

Everything here reads: ``SessionRegistry.read`` without ``drain``, ``peek`` and ``debug_view`` in one go with no
await in between (trio runs nothing else meanwhile, so no lock is needed and no session waits for the viewer).
Building the token views of a long session (the preview's export, each token's text) runs in a worker thread, as
finalize's export does (``VIEWER_INLINE_TOKENS``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import attrs

from proxy.controllers.off_loop import run_sized
from proxy.controllers.session_registry import SessionRegistry
from proxy.trajectory.export import SessionExport, export_segments
from proxy.trajectory.session import Session
from proxy.ui.segment_view import segment_view
from proxy.ui.token_text import TokenTexts
from proxy.ui.trie_view import live_trie, trie_from_segments

log = logging.getLogger("dressage_proxy.ui")

T = TypeVar("T")

#: a session's token views are built in a worker thread past this many tokens (or past the export's own threshold,
#: if lower): decoding each token's text costs about 7 us cold (0.7 s for 100k tokens), too long for the event loop
VIEWER_INLINE_TOKENS = 4096

#: the page's name for each session machine state (``statemachines/session.py``): reporting only
VIEW_STATES = {
    "ACTIVE": "live", "FINALIZING": "finalizing", "EXPORT_FAILED": "export_failed", "FINALIZED": "finalized",
    "DRAINED": "drained", "ABORTED": "aborted",
}


def _tokens(segments: Sequence[Mapping[str, Any]]) -> int:
    return sum(len(segment.get("token_ids") or ()) for segment in segments)


@attrs.define(eq=False)
class RegistrySource:
    """The viewer source of a running proxy (``proxy/routes/ui.py`` serves it)."""

    registry: SessionRegistry
    texts: TokenTexts

    def describe(self) -> dict[str, Any]:
        return {"kind": "proxy", "label": "this proxy", "token_text": self.texts.available}

    def _summary(self, session_id: str, session: Session | None, stored: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """One row of the session list (sync: call it right after reading the store)."""
        if session is None:  # its tombstone expired, its segments wait in the store
            return {"session_id": session_id, "state": "finalized", "machine_state": None, "live": False,
                    "steps": None, "in_flight": 0, "branches": None, "segments": len(stored),
                    "segments_preview": False, "tokens": _tokens(stored), "finalize_reason": None,
                    "instance_id": None}
        view = session.debug_view()
        preview = session.preview_export() if not stored else None
        tips = preview.tips if preview is not None else ()
        return {
            "session_id": session_id,
            "state": VIEW_STATES.get(view.state, view.state.lower()),
            "machine_state": view.state,
            "live": session.trie is not None,
            "steps": view.steps,
            "in_flight": view.in_flight,
            "branches": view.branches if session.trie is not None else None,  # the chains go with the trie
            "segments": len(stored) if stored else len(tips),
            "segments_preview": not stored and bool(tips),
            "tokens": _tokens(stored) if stored else sum(tip.length for tip in tips),
            "finalize_reason": view.finalize_reason,
            "instance_id": view.instance_id,
        }

    async def sessions(self) -> list[dict[str, Any]]:
        """Every session the registry or the store knows, newest first."""
        by_session: dict[str, list[Mapping[str, Any]]] = {}
        for segment in await self.registry.read():
            by_session.setdefault(str(segment.get("parent_traj_id")), []).append(segment)
        ids = self.registry.session_ids()
        ids += [session_id for session_id in by_session if self.registry.peek(session_id) is None]
        rows = [self._summary(sid, self.registry.peek(sid), by_session.get(sid, ())) for sid in ids]
        rows.reverse()
        return rows

    async def session(self, session_id: str) -> dict[str, Any] | None:
        """One session's trie and segments (see the module docstring), or None if neither registry nor store has it."""
        stored = await self.registry.read(session_id=session_id)
        session = self.registry.peek(session_id)
        if session is None and not stored:
            return None
        summary = self._summary(session_id, session, stored)
        if stored:
            trie = live_trie(session.trie) if session is not None and session.trie is not None else None
            views = await self._off_loop_if_long(_tokens(stored), self._views, stored, False)
            return {"session": summary, "trie": trie or trie_from_segments(stored), "segments": views, "note": None}
        if session is None or session.trie is None:
            note = {"drained": "its segments were drained by the trainer: only its statistics remain",
                    "aborted": "it was aborted: nothing was exported"}.get(summary["state"],
                                                                           "it holds no trie and no segment")
            return {"session": summary, "trie": None, "segments": [], "note": note}
        trie = live_trie(session.trie)
        export = session.preview_export()
        try:
            views = await self._off_loop_if_long(summary["tokens"], self._preview, export) if export else []
        except Exception:  # noqa: BLE001 - a preview is reporting: a bug here must not break the page
            log.exception("viewer: previewing the segments of session %r failed", session_id)
            return {"session": summary, "trie": trie, "segments": [],
                    "note": "its segments could not be previewed (logged); they appear at finalize"}
        note = ("live session: its segments are a preview of what a finalize would export now"
                if views else "live session: no step committed yet; segments appear once a step commits")
        return {"session": summary, "trie": trie, "segments": views, "note": note}

    async def _off_loop_if_long(self, tokens: int, function: Callable[..., T], *args: Any) -> T:
        """Inline for a short session, else in a worker thread (``VIEWER_INLINE_TOKENS``): what runs there reads
        committed steps and stored segments only, which nothing changes once written."""
        inline_max = min(VIEWER_INLINE_TOKENS, self.registry.config.thread_export_tokens)
        return await run_sized(tokens, inline_max, function, *args)

    def _views(self, segments: Sequence[Mapping[str, Any]], preview: bool) -> list[dict[str, Any]]:
        return [segment_view(segment, self.texts, preview=preview) for segment in segments]

    def _preview(self, export: SessionExport) -> list[dict[str, Any]]:
        """The segments a finalize would export now (pure ``export_segments``), as the viewer draws them."""
        built = export_segments(export, self.registry.config.export, self.registry.tokenizer)
        return self._views(built, True)


__all__ = ["RegistrySource", "VIEWER_INLINE_TOKENS", "VIEW_STATES"]
