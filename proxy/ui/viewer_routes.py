"""The viewer's HTTP surface, the same for a running proxy (``proxy/routes/ui.py``) and ``dressage-proxy view``:

| route | answer |
|---|---|
| ``GET /ui`` | 308 to ``/ui/`` (the page's relative URLs need the slash) |
| ``GET /ui/`` | ``static/index.html`` |
| ``GET /ui/static/<name>`` | one of the page's files (``viewer.js``, ``viewer.css``), 404 for any other name |
| ``GET /ui/api/sessions`` | ``{"source": {"kind", "label", "token_text"}, "sessions": [row, ...]}`` newest first |
| ``GET /ui/api/sessions/<session_id>`` | ``{"source", "session": row, "trie": tree or null, "segments": [...], |
| | "note"}``; 404 ``not_found`` for an unknown id |

A row: ``session_id``, ``state`` (``live``, ``finalizing``, ``export_failed``, ``finalized``, ``drained``,
``aborted``), ``machine_state``, ``live``, ``steps``, ``in_flight``, ``branches``, ``segments`` (with
``segments_preview``: counted from a live session's preview), ``tokens``, ``finalize_reason``, ``instance_id``.
The tree is ``trie_view.py``'s, a segment ``segment_view.py``'s. The session id is percent-encoded in the path
(``/`` allowed), as in ``GET /session/<session_id>``.

The page's files ship in the package (``pyproject.toml``'s package data) and are read once, at registration.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any, Protocol

from quart import Response, jsonify, redirect
from quart_trio import QuartTrio

from proxy.api import ApiError
from proxy.api.fields import identifier
from proxy.controllers.off_loop import run_sized

#: the page's files and their media types (nothing else under static/ is served)
STATIC_FILES = {
    "index.html": "text/html; charset=utf-8",
    "viewer.js": "text/javascript; charset=utf-8",
    "viewer.css": "text/css; charset=utf-8",
}


#: a session's JSON is encoded in a worker thread past this many tokens (json.dumps: about 1.4 us a token)
INLINE_JSON_TOKENS = 4096

#: the page loads its own files and its own JSON, nothing else, and is never framed (the token text is the model's
#: output, shown as text only: even if a bug put it into HTML, no inline script could run)
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


class ViewerSource(Protocol):
    """Where the viewer's data comes from (``registry_source.py``, ``export_file.py``)."""

    def describe(self) -> dict[str, Any]:
        """``{"kind": "proxy" | "file", "label", "token_text"}``: the page's header."""

    async def sessions(self) -> list[dict[str, Any]]:
        """The session rows, newest first."""

    async def session(self, session_id: str) -> dict[str, Any] | None:
        """One session's row, trie and segments; None if unknown."""


def _compact_json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "replace")


def static_files() -> dict[str, bytes]:
    """The page's files, from the installed package."""
    folder = resources.files("proxy.ui") / "static"
    return {name: (folder / name).read_bytes() for name in STATIC_FILES}


def add_viewer_routes(app: QuartTrio, source: ViewerSource) -> None:
    files = static_files()

    def static_response(name: str) -> Response:
        response = Response(files[name], content_type=STATIC_FILES[name])
        # The page is tiny and changes with the proxy's version: always revalidate, never a stale script.
        response.headers["Cache-Control"] = "no-cache"
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
        return response

    @app.get("/ui")
    async def viewer_root_without_slash():
        return redirect("/ui/", 308)

    @app.get("/ui/")
    async def viewer_page():
        return static_response("index.html")

    @app.get("/ui/static/<name>")
    async def viewer_static(name: str):
        if name not in STATIC_FILES or name == "index.html":
            raise ApiError.not_found(f"no viewer file {name[:64]!r}")
        return static_response(name)

    @app.get("/ui/api/sessions")
    async def viewer_sessions():
        return jsonify({"source": source.describe(), "sessions": await source.sessions()})

    @app.get("/ui/api/sessions/<path:session_id>")
    async def viewer_session(session_id: str):
        session_id = identifier(session_id, "session_id")
        found = await source.session(session_id)
        if found is None:
            raise ApiError.not_found(f"unknown session {session_id!r}", "session_id")
        # A long session's answer is megabytes of JSON (about 40 bytes a token): encoded off the event loop.
        tokens = sum(segment["token_count"] for segment in found["segments"])
        body = await run_sized(tokens, INLINE_JSON_TOKENS, _compact_json, {"source": source.describe(), **found})
        return Response(body, content_type="application/json")


__all__ = ["STATIC_FILES", "ViewerSource", "add_viewer_routes", "static_files"]
