"""``dressage-proxy view EXPORT.jsonl|.parquet``: the trajectory viewer on an exported file, without a proxy or an
engine. It serves the same page and the same ``/ui/api/`` JSON as a running proxy (``viewer_routes.py``), from
the file (``export_file.py``), on 127.0.0.1 only, prints the URL and opens a browser (``webbrowser``) unless
``--no-open``. Ctrl-C stops it.

Token text needs the model's tokenizer: ``--tokenizer-path`` (with ``--model`` naming its family), else the verified
tokenizer cache of ``dressage-tokenizers`` when it is complete (never a download: viewing a file must not reach the
network). Without one the page shows token ids alone, and says so.
"""

from __future__ import annotations

import argparse
import functools
import signal
import sys
import webbrowser
from pathlib import Path
from typing import Any

import trio
from quart import Response
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from proxy.access import AccessMiddleware, AccessPolicy
from proxy.api.error_mapping import api_error_for
from proxy.families import family_names, load_tito_tokenizer
from proxy.ui.export_file import ExportFileError, ExportFileSource, read_export
from proxy.ui.token_text import TokenTexts
from proxy.ui.viewer_routes import ViewerSource, add_viewer_routes
from serving.http_server import harden_app, serve_app
from serving.tokenizer_files import MODEL_FOLDERS, default_cache_dir, model_tokenizer_path, verify_root

HOST = "127.0.0.1"


def build_view_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dressage-proxy view",
        description="Open the trajectory viewer on an exported file (JSONL: one segment per line as "
        "/trajectory/read returns them; Parquet: one row per segment), served on 127.0.0.1 without a proxy.",
    )
    parser.add_argument("file", type=Path, help="the export: .jsonl, or .parquet")
    parser.add_argument("--port", type=int, default=0, help="port to serve on (default: any free port)")
    parser.add_argument("--no-open", action="store_true", help="print the URL without opening a browser")
    parser.add_argument("--model", choices=sorted(MODEL_FOLDERS), default="qwen3",
                        help="the tokenizer family that decodes token ids to text (default: qwen3)")
    parser.add_argument("--tokenizer-path", type=Path, default=None,
                        help="the tokenizer folder (default: the verified dressage-tokenizers cache, if complete)")
    return parser


def say(message: str) -> None:
    print(f"dressage-proxy view: {message}", file=sys.stderr, flush=True)


def token_texts(model: str, tokenizer_path: Path | None) -> TokenTexts:
    """The tokenizer for token text (see the module docstring), or none, said on stderr."""
    if tokenizer_path is None:
        cache = default_cache_dir()
        if verify_root(cache, (MODEL_FOLDERS[model],)):
            say(f"no tokenizer at {cache} (run dressage-tokenizers, or pass --tokenizer-path): token ids only")
            return TokenTexts(None)
        tokenizer_path = model_tokenizer_path(model, cache)
    # A fetched folder of no supported family (glm-5, deepseek-v3.1...) still decodes through its own template's
    # tokenizer: the template-only family loads any folder.
    family = model if model in family_names() else "generic"
    return TokenTexts(load_tito_tokenizer(family, tokenizer_path))


def create_view_app(source: ViewerSource) -> Any:
    """The viewer alone: its routes, errors in the proxy's JSON shape, and the Host and Origin rules of
    ``proxy/access.py`` (a page elsewhere cannot read the trajectories through a rebound name)."""
    app = harden_app(QuartTrio("dressage-proxy-view"))

    @app.errorhandler(HTTPException)
    @app.errorhandler(Exception)
    async def _error(error: Exception) -> Response:
        api_error = api_error_for(error)
        return Response(api_error.to_body(), status=api_error.status, content_type="application/json")

    add_viewer_routes(app, source)
    app.asgi_app = AccessMiddleware(app.asgi_app, AccessPolicy(bind_host=HOST))  # type: ignore[method-assign]
    return app


async def serve_view(source: ViewerSource, port: int, open_browser: bool, *,
                     task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Serve until cancelled; ``task_status.started(page_url)``."""
    async with trio.open_nursery() as nursery:
        url = await nursery.start(functools.partial(serve_app, create_view_app(source), HOST, port))
        page = f"{url}/ui/"
        print(page, flush=True)
        say(f"serving {source.describe()['label']} at {page} (Ctrl-C to stop)")
        if open_browser:
            # webbrowser may block while it starts a browser: not on the loop serving the page.
            opener = functools.partial(trio.to_thread.run_sync, webbrowser.open, page, abandon_on_cancel=True)
            nursery.start_soon(opener)
        task_status.started(page)


def view_main(argv: list[str]) -> int:
    """``dressage-proxy view ...`` (``proxy/cli.py:main`` dispatches here)."""
    args = build_view_parser().parse_args(argv)
    try:
        segments = read_export(args.file)  # first: a file it cannot read is refused before the tokenizer loads
        source = ExportFileSource(args.file.name, segments, token_texts(args.model, args.tokenizer_path))
    except (ExportFileError, OSError, ValueError) as exc:
        say(f"error: {exc}")
        return 2
    say(f"{len(source.segments)} segment(s) of {len(source.session_ids())} session(s) in {args.file}")
    try:
        trio.run(view_until_signalled, source, args.port, not args.no_open)
    except KeyboardInterrupt:
        pass  # a Ctrl-C before the signal receiver was installed: nothing was served yet
    say("stopped")
    return 0


async def view_until_signalled(source: ViewerSource, port: int, open_browser: bool) -> None:
    """Serve until SIGINT (Ctrl-C) or SIGTERM: nothing to flush, the file is only read."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_view, source, port, open_browser)
            async for _ in signals:
                nursery.cancel_scope.cancel()
                break


__all__ = ["build_view_parser", "create_view_app", "serve_view", "view_main"]
