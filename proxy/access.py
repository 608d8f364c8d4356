"""Who may call what: API and admin keys, JSON-only bodies, browser origins and the Host header (one ASGI wrapper).

A rollout proxy runs for days on shared hosts, so "it listens on 127.0.0.1" is not protection: every local process,
and every web page open in a browser on the host, can reach it. :class:`AccessMiddleware` checks each HTTP exchange
before the app sees it, in this order, and answers a refusal itself in the OpenAI error shape
(``proxy/api/errors.py``):

1. **Host** (403 ``forbidden``). Bound to a loopback address, the proxy only answers a ``Host`` that names the
   loopback (``localhost``, ``*.localhost``, ``127.x.y.z``, ``[::1]``). A page whose DNS name is rebound to
   127.0.0.1 (DNS rebinding) sends its own name and is refused; reverse proxies on the same host forward the
   upstream's address by default (nginx's ``proxy_pass http://127.0.0.1:8800``). Bound elsewhere, any Host is
   served (the keys are the protection there, and ``proxy/cli.py`` warns when the admin key is missing).
2. **Origin** (403 ``forbidden``). Browsers send ``Origin`` on every cross-origin POST, even a "simple" one the page
   cannot read the answer of; SDKs and trainers send none. A request whose ``Origin`` is neither the proxy's own
   nor listed in ``--cors-origin`` is refused, which also covers the body-less POST (``/v1/rollout/pause``) that
   rule 5 lets through.
3. **CORS preflight**. Only with ``--cors-origin``: an ``OPTIONS`` with ``Access-Control-Request-Method`` from a
   listed origin is answered 204 with the ``Access-Control-Allow-*`` headers (no key needed: browsers never send
   credentials on a preflight). Every answer to a listed origin carries ``Access-Control-Allow-Origin``; without
   the flag no CORS header is ever sent.
4. **Keys** (401 ``unauthorized`` with ``WWW-Authenticate``). :func:`route_class` puts every path in one class:
   ``OPEN`` (``/health``, ``/ready``), ``AGENT`` (the OpenAI-compatible API: every ``/v1/`` path except
   ``/v1/rollout/``), ``ADMIN`` (everything else, unknown paths included: a route added outside ``/v1/`` is behind
   the admin key until someone decides otherwise). ``--api-key`` guards AGENT, ``--admin-key`` guards ADMIN and
   also opens AGENT (a trainer holding it needs no second key). A class whose key is not set is open. The key is
   read from ``Authorization: Bearer <key>`` (the OpenAI SDKs), ``x-api-key`` (the Anthropic SDK) or the password
   of ``Authorization: Basic`` (any user name: a browser's sign-in), compared with :func:`hmac.compare_digest`, and
   never logged nor echoed. The 401 on the trajectory viewer's paths (``/ui``, ``/ui/...``) challenges with
   ``Basic`` so that a browser asks for the key; everywhere else with ``Bearer``.
5. **Media type** (415 ``unsupported_media_type``). A request that announces a body (``Content-Length`` > 0 or
   ``Transfer-Encoding``) on a method other than GET/HEAD/OPTIONS must be ``application/json`` (parameters allowed;
   a ``charset`` must be UTF-8, what the parser reads). A browser form or ``text/plain`` post is refused before its
   body is parsed. A POST *without* a body passes: ``ProxyClient.pause()`` and ``curl -X POST .../pause`` send
   none, and the handlers treat an absent body as ``{}``.

A refusal reads (and drops) the request body before answering: hypercorn's trio worker hangs a keep-alive
connection answered before its body arrived (``serving/http_server.py``, pitfall 1).
"""

from __future__ import annotations

import base64
import enum
import functools
import hmac
import ipaddress
import logging
import re
from collections.abc import Callable, Iterable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

import attrs
import trio
from werkzeug.http import parse_options_header

from proxy.api.errors import ApiError, ErrorCode
from proxy.asgi_wrapper import HttpExchangeWrapper
from proxy.config import ProxyConfig

log = logging.getLogger("dressage_proxy.access")


class RouteClass(enum.Enum):
    """Which key a path needs (see the module docstring, rule 4)."""

    OPEN = "open"
    AGENT = "agent"
    ADMIN = "admin"


#: probes orchestrators send without keys (``/health`` then shows only its verdict, ``proxy/routes/info.py``)
OPEN_PATHS = frozenset({"/health", "/ready"})
#: the OpenAI-compatible surface (chat completions, models; later responses, messages)
AGENT_PREFIX = "/v1/"
#: inside ``/v1/`` but control, not agent traffic
ADMIN_PREFIXES = ("/v1/rollout/",)

#: methods whose requests carry no body the app reads
BODILESS_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: what a preflight may ask for (every route of the proxy is one of these)
CORS_METHODS = "GET, POST, OPTIONS"
#: response headers a browser page may read: the request id and a paused answer's retry hint
CORS_EXPOSED_HEADERS = "x-request-id, retry-after"
#: seconds a browser may cache a preflight answer
CORS_MAX_AGE = "600"

WWW_AUTHENTICATE = 'Bearer realm="dressage-proxy"'
#: the challenge on the viewer's paths: a browser answers it with a sign-in prompt (the key as the password)
BASIC_CHALLENGE = 'Basic realm="dressage-proxy"'
#: the trajectory viewer's pages (proxy/ui/viewer_routes.py), opened in a browser
BROWSER_PREFIX = "/ui"


def route_class(path: str) -> RouteClass:
    """The class of a request path; repeated slashes are merged first, as the router does (``//v1/rollout``)."""
    if "//" in path:  # every request passes here: the regex only when there is something to merge
        path = re.sub("/{2,}", "/", path)
    if path in OPEN_PATHS:
        return RouteClass.OPEN
    # "/v1/rollout" itself is the admin prefix too (the trailing "/" makes the test whole segments).
    if path.startswith(AGENT_PREFIX) and not (path + "/").startswith(ADMIN_PREFIXES):
        return RouteClass.AGENT
    return RouteClass.ADMIN


# -- keys ------------------------------------------------------------------------------------------------------------


def basic_password(credential: str) -> str | None:
    """The password of a ``Basic`` credential (base64 of ``user:password``), None when it is malformed or empty."""
    try:
        decoded = base64.b64decode(credential.strip(), validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None
    _, colon, password = decoded.partition(":")
    return password if colon and password else None


def presented_keys(authorization: str | None, x_api_key: str | None) -> tuple[str, ...]:
    """The keys a request offers: a ``Bearer`` credential or a ``Basic`` one's password (schemes case-insensitive),
    and ``x-api-key``."""
    keys = []
    if authorization:
        scheme, _, credential = authorization.strip().partition(" ")
        if scheme.lower() == "bearer" and credential.strip():
            keys.append(credential.strip())
        elif scheme.lower() == "basic" and (password := basic_password(credential)) is not None:
            keys.append(password)
    if x_api_key and x_api_key.strip():
        keys.append(x_api_key.strip())
    return tuple(keys)


def key_matches(presented: Iterable[str], key: str) -> bool:
    """Whether any presented key is ``key``, compared in constant time (in the key's content)."""
    expected = key.encode()
    # Every presented key is compared (no early exit that tells which header matched).
    results = [hmac.compare_digest(candidate.encode(), expected) for candidate in presented]
    return any(results)


@attrs.frozen
class AccessPolicy:
    """The access settings of one running proxy (from :class:`proxy.config.ProxyConfig`)."""

    api_key: str | None = attrs.field(default=None, repr=False)
    admin_key: str | None = attrs.field(default=None, repr=False)
    cors_origins: tuple[str, ...] = ()
    #: the address the proxy listens on (decides the Host rule)
    bind_host: str = "127.0.0.1"

    @classmethod
    def from_config(cls, config: ProxyConfig) -> AccessPolicy:
        return cls(config.api_key, config.admin_key, tuple(config.cors_origins), config.host)

    def is_admin(self, presented: Iterable[str]) -> bool:
        """Whether the caller may use ADMIN routes (always, when no admin key is set)."""
        return self.admin_key is None or key_matches(presented, self.admin_key)

    def admits(self, route: RouteClass, presented: tuple[str, ...]) -> bool:
        if route is RouteClass.OPEN:
            return True
        if route is RouteClass.AGENT:
            if self.api_key is None or key_matches(presented, self.api_key):
                return True
            return self.admin_key is not None and key_matches(presented, self.admin_key)
        return self.is_admin(presented)

    def origin_listed(self, origin: str) -> bool:
        return "*" in self.cors_origins or origin in self.cors_origins


def is_browser_path(path: str) -> bool:
    """The trajectory viewer's paths, whose 401 asks a browser to sign in (``Basic``)."""
    return path == BROWSER_PREFIX or path.startswith(BROWSER_PREFIX + "/")


def unauthorized(route: RouteClass, presented: tuple[str, ...], *, browser: bool = False) -> ApiError:
    """401 naming which key the route needs, never the key that was sent; ``browser``: the ``Basic`` challenge."""
    which = "the admin key (--admin-key)" if route is RouteClass.ADMIN else "the API key (--api-key)"
    if browser:
        message = (f"this page needs {which}: sign in with the key as the password (any user name), "
                   "or send 'Authorization: Bearer <key>'")
        return ApiError.of(ErrorCode.UNAUTHORIZED, message, headers={"WWW-Authenticate": BASIC_CHALLENGE})
    if presented:
        message = f"the key sent is not valid here: this endpoint needs {which}"
        challenge = f'{WWW_AUTHENTICATE}, error="invalid_token"'
    else:
        message = f"this endpoint needs {which}: send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'"
        challenge = WWW_AUTHENTICATE
    return ApiError.of(ErrorCode.UNAUTHORIZED, message, headers={"WWW-Authenticate": challenge})


# -- Host and Origin -------------------------------------------------------------------------------------------------


# Cached, as :func:`_names_loopback`: a client sends the same Host on every request, and the two address parses were
# ~7 µs of each (issue 21 item 2). Bounded: Host values are the client's to choose.
@functools.lru_cache(maxsize=1024)
def is_loopback_name(host: str) -> bool:
    """``localhost``, a ``.localhost`` name (RFC 6761: always the loopback), or a loopback IP address."""
    host = host.strip().strip("[]").rstrip(".").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(authority: str) -> str | None:
    """The host part of a ``Host`` header or an origin's authority (``[::1]:8800`` -> ``::1``)."""
    try:
        return urlsplit("//" + authority.strip()).hostname
    except ValueError:
        return None


def host_refusal(policy: AccessPolicy, host: str | None) -> ApiError | None:
    """403 for a non-loopback Host while bound to a loopback address (DNS rebinding); None otherwise."""
    if host is None or not is_loopback_name(policy.bind_host):
        return None  # HTTP/1.0 without Host is no browser; bound elsewhere any name may reach the proxy
    if _names_loopback(host):
        return None
    return ApiError.of(
        ErrorCode.FORBIDDEN,
        "this proxy listens on a loopback address and answers only Host names of the loopback "
        "(localhost, 127.0.0.1, [::1])",
    )


@functools.lru_cache(maxsize=1024)
def _names_loopback(host: str) -> bool:
    """Whether a ``Host`` header names the loopback."""
    name = host_name(host)
    return name is not None and is_loopback_name(name)


def same_origin(origin: str, host: str | None, scheme: str) -> bool:
    """Whether ``origin`` is the proxy's own (the scheme and Host this request came with)."""
    return host is not None and origin.lower() == f"{scheme}://{host}".lower()


def origin_refusal(policy: AccessPolicy, origin: str, host: str | None, scheme: str) -> ApiError | None:
    if same_origin(origin, host, scheme) or policy.origin_listed(origin):
        return None
    return ApiError.of(
        ErrorCode.FORBIDDEN,
        "requests from this browser origin are not accepted (the operator lists allowed origins with --cors-origin)",
    )


# -- media type ------------------------------------------------------------------------------------------------------


def announces_body(content_length: str | None, transfer_encoding: str | None) -> bool:
    """Whether the request head says a body follows (a non-numeric length counts as one: it is refused anyway)."""
    if transfer_encoding:
        return True
    if content_length is None:
        return False
    return content_length.strip() != "0"


def is_json_media_type(content_type: str | None) -> bool:
    """``application/json``, with no charset or a UTF-8 one (the body parser decodes UTF-8)."""
    if not content_type:
        return False
    media_type, options = parse_options_header(content_type)
    charset = options.get("charset", "utf-8").lower().replace("_", "-")
    return media_type.lower() == "application/json" and charset in ("utf-8", "utf8")


def media_type_refusal(method: str, headers: dict[str, str]) -> ApiError | None:
    if method in BODILESS_METHODS:
        return None
    if not announces_body(headers.get("content-length"), headers.get("transfer-encoding")):
        return None
    if is_json_media_type(headers.get("content-type")):
        return None
    return ApiError.of(
        ErrorCode.UNSUPPORTED_MEDIA_TYPE,
        "request bodies must be JSON sent as 'Content-Type: application/json'",
        param="Content-Type",
    )


# -- the bind warning ------------------------------------------------------------------------------------------------


def bind_warning(config: ProxyConfig) -> str | None:
    """What ``dressage-proxy`` prints at start when it listens beyond the loopback without an admin key."""
    if is_loopback_name(config.host) or config.admin_key is not None:
        return None
    return (
        f"warning: listening on {config.host} without an admin key: anyone who can reach this port can pause, "
        "resume, finalize and drain sessions and read trajectories. Set DRESSAGE_ADMIN_KEY (and DRESSAGE_API_KEY for "
        "the agent API), or bind to 127.0.0.1"
    )


# -- the ASGI wrapper ------------------------------------------------------------------------------------------------


def _header_map(scope: MutableMapping[str, Any]) -> dict[str, str]:
    """The request headers by lower-case name (a repeated header: its last value)."""
    return {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope.get("headers") or ()}


class AccessMiddleware(HttpExchangeWrapper):
    """ASGI middleware applying :class:`AccessPolicy` (see the module docstring for the rules and their order)."""

    def __init__(
        self, app: Callable[..., Any], policy: AccessPolicy, *, drain_bytes: int = 32 * 1024**2,
        drain_seconds: float = 120.0,
    ) -> None:
        super().__init__(app)
        self.policy = policy
        #: a refused request's body is read (and dropped) up to these bounds, the body limits of
        #: proxy/service_flags.py, so a refusal is no way around --max-body-bytes and --body-read-timeout
        self.drain_bytes = drain_bytes
        self.drain_seconds = drain_seconds

    async def exchange(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        headers = _header_map(scope)
        method = str(scope.get("method", "GET")).upper()
        origin = headers.get("origin")
        host = headers.get("host")
        cors = origin is not None and self.policy.origin_listed(origin)
        send = self._with_cors(send, origin) if cors else send

        refusal = host_refusal(self.policy, host)
        if refusal is None and origin is not None:
            refusal = origin_refusal(self.policy, origin, host, str(scope.get("scheme", "http")))
        if refusal is None and cors and method == "OPTIONS" and "access-control-request-method" in headers:
            await self._drain(receive)
            await self._preflight(send, headers)
            return
        if refusal is None:
            path = str(scope.get("path", "/"))
            route = route_class(path)
            presented = presented_keys(headers.get("authorization"), headers.get("x-api-key"))
            if not self.policy.admits(route, presented):
                refusal = unauthorized(route, presented, browser=is_browser_path(path))
        if refusal is None:
            refusal = media_type_refusal(method, headers)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        whole_body_read = await self._drain(receive)
        # Never the key: the code says which rule refused (the path may name a session, which is no secret here).
        log.info("refused %s %s: %s", method, scope.get("path"), refusal.code, extra={"code": str(refusal.code)})
        await _send_error(send, refusal, close=not whole_body_read)

    async def _drain(self, receive: Any) -> bool:
        """Read the request body to its end, keeping nothing (see the module docstring); False when it did not end
        within the body limits (the answer then closes the connection instead of leaving unread bytes on it)."""
        received = 0
        with trio.move_on_after(self.drain_seconds):
            while received <= self.drain_bytes:
                message = await receive()
                if message.get("type") != "http.request" or not message.get("more_body"):
                    return True
                received += len(message.get("body") or b"")
        return False

    @staticmethod
    def _with_cors(send: Any, origin: str) -> Any:
        extra = [
            (b"access-control-allow-origin", origin.encode("latin-1")),
            (b"access-control-expose-headers", CORS_EXPOSED_HEADERS.encode()),
            (b"vary", b"Origin"),
        ]

        async def send_with_cors(message: MutableMapping[str, Any]) -> None:
            if message.get("type") == "http.response.start":
                message = {**message, "headers": [*(message.get("headers") or ()), *extra]}
            await send(message)

        return send_with_cors

    @staticmethod
    async def _preflight(send: Any, headers: dict[str, str]) -> None:
        answer = [(b"access-control-allow-methods", CORS_METHODS.encode()),
                  (b"access-control-max-age", CORS_MAX_AGE.encode())]
        requested = headers.get("access-control-request-headers")
        if requested:
            answer.append((b"access-control-allow-headers", requested.encode("latin-1")))
        await send({"type": "http.response.start", "status": 204, "headers": answer})
        await send({"type": "http.response.body", "body": b""})


async def _send_error(send: Any, error: ApiError, *, close: bool = False) -> None:
    body = error.to_body()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    headers += [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in error.headers.items()]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


__all__ = [
    "AccessMiddleware", "AccessPolicy", "RouteClass", "basic_password", "bind_warning", "is_browser_path",
    "is_json_media_type", "is_loopback_name", "key_matches", "presented_keys", "route_class",
]
