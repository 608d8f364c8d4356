"""The HTTP stack's own floor for ``bench/server_floor.py``: a bare ASGI app on hypercorn-trio, no quart, no proxy.

Per request it reads the body and answers a fixed ``chat.completion``; with ``--upstream URL`` it first sends one
fixed ``/generate`` request through the proxy's own upstream client (``proxy/upstream/client.py:SGLangClient``), as
the proxy does for every turn. What is left of the proxy's CPU above this is the proxy's own work.

    python bench/bare_server.py --port N [--upstream http://127.0.0.1:M]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from proxy.upstream.client import SGLangClient  # noqa: E402

from fixed_upstream import PROMPT, SHORT_ANSWER  # noqa: E402

ANSWER = json.dumps({
    "id": "chatcmpl-bare", "object": "chat.completion", "created": 1, "model": "bench",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": SHORT_ANSWER}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": len(PROMPT), "completion_tokens": 8, "total_tokens": len(PROMPT) + 8},
}).encode()
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(ANSWER)).encode())]


def make_app(client: SGLangClient | None) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        more = True
        while more:
            message = await receive()
            more = message.get("more_body", False)
        if client is not None:
            await client.generate(PROMPT, {"max_new_tokens": 8})
        await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
        await send({"type": "http.response.body", "body": ANSWER})

    return app


async def main(port: int, upstream: str | None) -> None:
    config = Config()
    config.bind, config.accesslog = [f"127.0.0.1:{port}"], None
    if upstream is None:
        await serve(make_app(None), config)
        return
    async with SGLangClient(upstream, (upstream,)) as client:
        await serve(make_app(client), config)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream")
    args = parser.parse_args()
    trio.run(main, args.port, args.upstream)
