"""``dressage-proxy fleet pause|resume --urls URL,URL,...``: the trainer's pause and resume of a whole fleet, from a
shell (``proxy/fleet.py:ProxyFleet`` does the work).

It prints the combined result as one JSON object (``action``, ``ok``, ``weight_version``, ``failed``, and each
proxy's answer or error under ``proxies``) and exits 0 when every proxy confirmed, 1 when any failed, 2 on bad
arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from urllib.parse import urlsplit

import httpx
import trio

from proxy.client import ADMIN_KEY_ENV
from proxy.fleet import FleetResult, ProxyFleet


def proxy_urls(text: str) -> list[str]:
    """``--urls``: comma-separated http(s) URLs (blank items ignored)."""
    urls = [item.strip().rstrip("/") for item in text.split(",") if item.strip()]
    if not urls:
        raise argparse.ArgumentTypeError("no proxy URL given")
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise argparse.ArgumentTypeError(f"not an http(s) URL: {url!r}")
    return urls


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dressage-proxy fleet",
        description="Pause or resume every proxy of a fleet; prints the combined result as JSON, exits 1 when any "
        "proxy did not confirm.",
    )
    parser.add_argument("action", choices=("pause", "resume"))
    parser.add_argument("--urls", type=proxy_urls, required=True, metavar="URL,URL,...",
                        help="the proxies' base URLs, comma-separated (each proxy directly, not the load balancer)")
    parser.add_argument("--admin-key", default=os.environ.get(ADMIN_KEY_ENV) or None,
                        help=f"the proxies' --admin-key (default: ${ADMIN_KEY_ENV})")
    parser.add_argument("--weight-version", default=None,
                        help="resume: the weight version now loaded (default: each proxy keeps its own)")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help="bound each proxy's answer (default: none; a pause returns once nothing generates)")
    return parser


def fleet_main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.weight_version is not None and args.action != "resume":
        build_parser().error("--weight-version goes with resume")
    timeout = httpx.Timeout(args.timeout, connect=min(args.timeout, 30.0)) if args.timeout else None

    async def run() -> FleetResult:
        options = {"timeout": timeout} if timeout is not None else {}
        async with ProxyFleet(args.urls, admin_key=args.admin_key, **options) as fleet:
            if args.action == "pause":
                return await fleet.pause()
            return await fleet.resume(args.weight_version)

    result = trio.run(run)
    json.dump(result.as_json(), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0 if result.ok else 1


__all__ = ["fleet_main"]
