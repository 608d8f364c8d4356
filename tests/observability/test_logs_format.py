"""The log set-up's pieces, in process: the formats, the levels, and the ids through the real ASGI wrappers and real
trio tasks (``serving/log_format.py``, ``proxy/observability/logs.py``, ``proxy/observability/exchanges.py``,
``proxy/session_context.py``). The process-level behaviour is ``test_logs_process.py``'s."""

from __future__ import annotations

import contextvars
import io
import json
import logging
import os
import pty
from collections.abc import Iterator
from typing import Any

import pytest
import trio

from proxy.config import ProxyConfig
from proxy.observability.exchanges import ExchangeObserver
from proxy.observability.logs import configure_proxy_logging
from proxy.request_id import RequestIdMiddleware
from proxy.session_context import current_session_id, set_current_session_id
from serving.log_format import RECORD_LOOKUPS, configure_logging, resolve_format

NAMESPACES = ("dressage_proxy", "engine", "httpx")


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """configure_logging changes process-wide state: put the root handlers and the levels back afterwards."""
    root = logging.getLogger()
    handlers, levels = list(root.handlers), {name: logging.getLogger(name).level for name in ("", *NAMESPACES)}
    lookups = {name: getattr(logging, name) for name in RECORD_LOOKUPS}
    yield
    for name, value in lookups.items():
        setattr(logging, name, value)
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
    logging.captureWarnings(False)


def proxy_stream(log_format: str, level: str = "info") -> io.StringIO:
    stream = io.StringIO()
    configure_proxy_logging(ProxyConfig(log_format=log_format, log_level=level), stream=stream)
    return stream


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_auto_is_text_on_a_terminal_and_json_elsewhere() -> None:
    leader, follower = pty.openpty()
    try:
        with os.fdopen(follower, "w", closefd=False) as terminal:
            assert resolve_format("auto", terminal) == "text"
    finally:
        os.close(leader)
        os.close(follower)
    assert resolve_format("auto", io.StringIO()) == "json"
    assert resolve_format("text", io.StringIO()) == "text"
    with pytest.raises(ValueError, match="unknown log format"):
        resolve_format("yaml", io.StringIO())


def test_json_line_has_the_standard_fields_and_the_extras(restore_logging) -> None:
    stream = proxy_stream("json")
    logging.getLogger("dressage_proxy.sessions").info("session %r finalized", "s", extra={"steps": 3, "reason": "x"})
    (line,) = lines(stream)
    assert line["level"] == "INFO" and line["logger"] == "dressage_proxy.sessions"
    assert line["message"] == "session 's' finalized" and (line["steps"], line["reason"]) == (3, "x")
    assert line["timestamp"].endswith("+00:00")
    assert "request_id" not in line and "session_id" not in line  # outside an exchange: no ids, not nulls


def test_the_engines_lines_and_tracebacks_come_out_in_the_same_format(restore_logging) -> None:
    stream = proxy_stream("json")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("engine.scheduler").exception("generation of %s failed", "rid-1")
    (line,) = lines(stream)
    assert (line["level"], line["logger"], line["message"]) == ("ERROR", "engine.scheduler", "generation of rid-1 failed")
    assert "RuntimeError: boom" in line["exc_info"]


def test_levels_apply_to_our_loggers_and_libraries_only_log_warnings(restore_logging) -> None:
    stream = proxy_stream("json", "info")
    logging.getLogger("dressage_proxy.gate").debug("hidden at info")
    logging.getLogger("httpx").info("HTTP Request: POST ... (a library's per-request line)")
    logging.getLogger("httpx").warning("a library's warning")
    logging.getLogger("engine.app").info("the engine's info")
    assert [line["message"] for line in lines(stream)] == ["a library's warning", "the engine's info"]
    stream = proxy_stream("json", "warning")
    logging.getLogger("dressage_proxy.requests").info("no access line at warning")
    logging.getLogger("dressage_proxy.gate").warning("kept")
    assert [line["message"] for line in lines(stream)] == ["kept"]


def test_a_second_configuration_replaces_the_first_handler(restore_logging) -> None:
    first = proxy_stream("json")
    second = proxy_stream("text")
    logging.getLogger("dressage_proxy").warning("once")
    assert first.getvalue() == "" and second.getvalue().endswith("WARNING dressage_proxy: once\n")


def test_text_lines_append_the_ids_on_the_first_line(restore_logging) -> None:
    stream = proxy_stream("text")

    def log_a_failure() -> None:
        set_current_session_id("sess-text")  # outside an exchange: this context's (a copy, not the test's)
        try:
            raise ValueError("bad")
        except ValueError:
            logging.getLogger("dressage_proxy").error("it failed", exc_info=True, extra={"request_id": "req_1"})

    contextvars.copy_context().run(log_a_failure)
    first, *rest = stream.getvalue().splitlines()
    assert first.endswith("ERROR dressage_proxy: it failed [request_id=req_1 session_id=sess-text]")
    assert rest[0] == "Traceback (most recent call last):" and rest[-1] == "ValueError: bad"


def test_the_session_id_is_seen_by_the_exchanges_outer_layers_and_the_tasks_it_starts(restore_logging) -> None:
    """The route learns the session id in a task of its own (here: a child task, as quart-trio's handler may run);
    the access line is written by the outer wrapper when the exchange ends, and a task the handler started in an
    app-wide nursery (the generation driver) logs later still: all of them carry both ids."""
    stream = proxy_stream("json")
    log = logging.getLogger("dressage_proxy.generation")
    answered: list[str] = []

    async def main() -> None:
        async with trio.open_nursery() as app_nursery:

            async def handler_task(done: trio.Event) -> None:
                set_current_session_id("sess-1")
                log.info("in the handler")

                async def driver() -> None:
                    await trio.sleep(0.01)
                    log.info("in the driver, after the exchange ended")

                app_nursery.start_soon(driver)
                done.set()

            async def app(scope: Any, receive: Any, send: Any) -> None:
                if scope["path"] == "/v1/chat/completions":
                    done = trio.Event()
                    async with trio.open_nursery() as exchange:
                        exchange.start_soon(handler_task, done)
                    await done.wait()
                    assert current_session_id() == "sess-1"  # the parent task sees the child's set
                await send({"type": "http.response.start", "status": 201, "headers": []})
                await send({"type": "http.response.body", "body": b"12345"})

            async def send(message: Any) -> None:
                if message["type"] == "http.response.start":
                    answered.append(dict(message["headers"])[b"x-request-id"].decode())

            wrapped = RequestIdMiddleware(ExchangeObserver(app))
            scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions"}
            await wrapped(scope, None, send)
            await wrapped(dict(scope, path="/other"), None, send)  # the next exchange starts without a session

        assert current_session_id() is None

    trio.run(main)
    first_id, second_id = answered
    got = lines(stream)
    by_message = {line["message"]: line for line in got}
    for message in ("in the handler", "in the driver, after the exchange ended", "POST /v1/chat/completions 201"):
        line = next(line for text, line in by_message.items() if text.startswith(message))
        assert (line["request_id"], line["session_id"]) == (first_id, "sess-1"), line
    access = next(line for line in got if line["logger"] == "dressage_proxy.requests" and line["path"] == "/other")
    assert access["request_id"] == second_id and "session_id" not in access
    first_access = next(line for line in got if line.get("path") == "/v1/chat/completions")
    assert (first_access["status"], first_access["response_bytes"], first_access["complete"]) == (201, 5, True)
    assert first_access["endpoint"] == "other"  # no quart app matched a rule here


def test_an_exchange_the_client_left_before_an_answer_logs_499_incomplete(restore_logging) -> None:
    stream = proxy_stream("json")

    async def main() -> None:
        started = trio.Event()

        async def app(scope: Any, receive: Any, send: Any) -> None:
            set_current_session_id("sess-gone")
            started.set()
            await trio.sleep_forever()  # generating; the client's disconnect cancels the exchange

        async def send(message: Any) -> None:
            raise AssertionError("nothing is sent")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ExchangeObserver(app), {"type": "http", "method": "POST", "path": "/p"}, None, send)
            await started.wait()
            nursery.cancel_scope.cancel()

    trio.run(main)
    (line,) = lines(stream)
    assert (line["status"], line["complete"], line["response_bytes"], line["session_id"]) == (499, False, 0, "sess-gone")
