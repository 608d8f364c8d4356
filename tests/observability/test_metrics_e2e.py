"""``GET /metrics`` end to end (issue 19, item 1): a proxy on its embedded engine, driven with the official openai
SDK and the rollout endpoints over real sockets, scraped over HTTP and parsed with prometheus-client's parser.

Each test checks that the contract's metrics moved by exactly what was done (counts equal to the requests,
tokens, pauses, segments made), not only that they exist. The pause tests run on trio's ``MockClock`` with an
autojump threshold (as ``tests/e2e/test_pause_resume.py`` does): the engine streams 10 tokens per virtual second and
the tests wait for engine state, never for wall-clock time.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from proxy.client import ProxyClient
# The e2e suite's proxy fixture, imported rather than shared through a conftest of this folder (other parts of
# issue 19 write tests here too).
from tests.e2e.conftest import start_proxy  # noqa: F401
from tests.e2e.harness import CALCULATOR_TOOLS, assistant_echo, session_headers
from tests.observability.metrics_scrape import Scrape, get_metrics, scrape

NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}
WORDS = " ".join(f"w{i}" for i in range(16))
CHAT = "/v1/chat/completions"


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0.02)


async def stats(proxy: Any) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=None) as client:
        response = await client.get(proxy.url + "/trajectory/stats")
    assert response.status_code == 200, response.text
    return response.json()


def histogram_count(scrape: Scrape, name: str, **labels: str) -> float:
    count = scrape.value(f"{name}_count", **labels)
    # The +Inf bucket holds every observation, as the count says.
    assert scrape.value(f"{name}_bucket", le="+Inf", **labels) == count
    return count


async def test_metrics_count_requests_generations_tokens_and_a_finalized_session(start_proxy) -> None:
    proxy = await start_proxy(script=[
        {"session": "m1", "output": "first answer"}, {"session": "m1", "output": "second answer"},
    ])
    before = await scrape(proxy.url)
    # Nothing happened yet: the fixed label sets are there at zero, the scrape-time families read the registry.
    assert before.value("dressage_generations_total", outcome="responded") == 0
    assert before.value("dressage_generations_in_flight") == 0
    assert before.value("dressage_sessions", state="live") == 0
    assert before.value("dressage_segments_total", boundary_reason="session_start") == 0
    assert before.value("dressage_store_bytes") == 0
    assert before.value("process_cpu_seconds_total") > 0  # the process collector, in the proxy's own registry

    messages: list[dict[str, Any]] = [{"role": "user", "content": "hello"}]
    async with proxy.async_client() as client:
        first = await client.chat.completions.create(
            model="m", messages=messages, extra_headers=session_headers("m1"), extra_body=NO_THINKING)
        # The second turn streams, and extends the first (an incremental TITO encode).
        messages += [assistant_echo(first.choices[0].message), {"role": "user", "content": "more"}]
        stream = await client.chat.completions.create(
            model="m", messages=messages, stream=True, stream_options={"include_usage": True},
            extra_headers=session_headers("m1"), extra_body=NO_THINKING)
        chunks = [chunk async for chunk in stream]
    streamed_usage = [chunk.usage for chunk in chunks if chunk.usage is not None][-1]
    generated = first.usage.completion_tokens + streamed_usage.completion_tokens
    live = await scrape(proxy.url)
    assert live.value("dressage_sessions", state="live") == 1
    assert live.value("dressage_sessions", state="finalized") == 0

    finalized = await proxy.finalize("m1")
    assert finalized["segments"] == 1
    async with httpx.AsyncClient(timeout=None) as http:
        missing = await http.get(proxy.url + "/no/such/path")
    assert missing.status_code == 404
    stored = await stats(proxy)
    after = await scrape(proxy.url)

    # Requests by route rule, protocol and status (the scrapes before this one are counted too, as admin).
    assert after.value("dressage_requests_total", endpoint=CHAT, protocol="chat_completions", status="200") == 2
    assert after.value("dressage_requests_total", endpoint="/session/finalize", protocol="rollout",
                       status="200") == 1
    assert after.value("dressage_requests_total", endpoint="/trajectory/stats", protocol="rollout",
                       status="200") == 1
    assert after.value("dressage_requests_total", endpoint="/metrics", protocol="admin", status="200") == 2
    assert after.value("dressage_requests_total", endpoint="other", protocol="other", status="404") == 1
    assert histogram_count(after, "dressage_request_duration_seconds", endpoint=CHAT) == 2
    # No raw path (and so no session id) ever becomes a label.
    assert after.labels_of("dressage_requests_total", "endpoint") == {
        CHAT, "/session/finalize", "/trajectory/stats", "/metrics", "other"}

    # Generations: two answered, none in flight, their tokens counted once each.
    assert after.value("dressage_generations_total", outcome="responded") == 2
    assert after.total("dressage_generations_total") == 2
    assert after.value("dressage_generations_in_flight") == 0
    assert after.value("dressage_generated_tokens_total") == generated
    assert histogram_count(after, "dressage_generation_duration_seconds") == 2
    assert histogram_count(after, "dressage_time_to_first_token_seconds") == 2
    assert histogram_count(after, "dressage_generation_tokens_per_second") == 2

    # Tokenization: both steps' contexts, inline (short); the second turn was one TITO check, and it held.
    assert histogram_count(after, "dressage_tokenization_seconds", where="inline") == 2
    assert histogram_count(after, "dressage_tokenization_seconds", where="off_loop") == 0
    assert after.value("dressage_tito_drift_audits_total", outcome="ok") == 1
    assert after.total("dressage_tito_drift_audits_total") == 1

    # The finalize: one session, one segment (the two turns extend each other), one store write.
    assert after.value("dressage_sessions_finalized_total", reason="requested") == 1
    assert after.value("dressage_sessions_finalized_total", reason="idle_timeout") == 0
    assert after.value("dressage_segments_total", boundary_reason="session_start") == 1
    assert after.total("dressage_segments_total") == 1
    assert (after.value("dressage_sessions", state="live"), after.value("dressage_sessions", state="finalized")) == (
        0, 1)
    assert histogram_count(after, "dressage_store_write_seconds") == 1
    assert after.value("dressage_store_write_bytes_total") == stored["bytes"] > 0
    assert (after.value("dressage_store_bytes"), after.value("dressage_store_segments")) == (stored["bytes"], 1)
    # Every token came from the engine's one version: spread 0, in the contract's buckets.
    assert histogram_count(after, "dressage_segment_weight_version_spread") == 1
    assert after.value("dressage_segment_weight_version_spread_bucket", le="0.0") == 1
    assert after.value("dressage_segment_weight_version_spread_sum") == 0

    # The trainer drains the segment: the store is empty, the session a tombstone.
    drained = await proxy.post("/trajectory/read", {"session_id": "m1", "drain": True})
    assert len(drained.json()["data"]) == 1
    acked = await proxy.post("/trajectory/ack", {"lease_id": drained.json()["lease_id"]})
    assert acked.json() == {"acknowledged": 1}
    last = await scrape(proxy.url)
    assert (last.value("dressage_store_bytes"), last.value("dressage_store_segments")) == (0, 0)
    assert last.value("dressage_sessions", state="tombstone") == 1
    assert last.value("dressage_sessions", state="finalized") == 0


WhilePaused = Callable[[ProxyClient, dict[str, Any]], Awaitable[str | None]]


async def answer_cut_by_a_pause(proxy: Any, session: str, while_paused: WhilePaused) -> tuple[Any, dict[str, Any]]:
    """An agent's request, paused once the engine generated 5 of its tokens; ``while_paused(rollout, paused)`` runs
    during the pause and says the weight version to resume with. Returns the agent's answer and the pause's."""
    answers: list[Any] = []

    async def agent() -> None:
        async with proxy.async_client() as client:
            answers.append(await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "count"}], extra_headers=session_headers(session),
                extra_body=NO_THINKING))

    async with ProxyClient(proxy.url) as rollout, trio.open_nursery() as nursery:
        nursery.start_soon(agent)
        await proxy.engine.wait_until(lambda: any(len(s.output_ids) >= 5 for s in proxy.engine.active_requests()))
        paused = await rollout.pause()
        assert paused["aborted"] == 1 and paused["tokens_kept"] >= 5
        await rollout.resume(weight_version=await while_paused(rollout, paused))
    (answer,) = answers
    return answer, paused


async def test_metrics_pause_cuts_a_generation_and_partial_rollout_keeps_its_tokens(start_proxy, mock_clock) -> None:
    proxy = await start_proxy(script=[{"session": "p", "output": WORDS}], engine={"token_rate": 10.0,
                              "weight_version": "1"}, partial_rollout=True)

    async def while_paused(rollout: ProxyClient, paused: dict[str, Any]) -> str:
        during = await scrape(proxy.url)
        assert during.value("dressage_pauses_total") == 1
        assert histogram_count(during, "dressage_pause_ack_seconds") == 1
        assert during.value("dressage_pause_generations_cut_total") == 1
        assert during.value("dressage_generations_in_flight") == 1  # cut, waiting for the resume
        # The fate of the cut tokens is decided by the resume.
        assert during.total("dressage_pause_tokens_total") == 0
        # A second pause while paused is no new pause.
        assert (await rollout.pause())["already_paused"] is True
        async with httpx.AsyncClient(timeout=None) as engine_http:
            update = await engine_http.post(proxy.engine_handle.url + "/update_weights_from_disk",
                                            json={"model_path": "/ckpt/3", "weight_version": "3"})
        assert update.status_code == 200
        return "3"

    answer, paused = await answer_cut_by_a_pause(proxy, "p", while_paused)
    assert answer.choices[0].message.content == WORDS
    await proxy.finalize("p")
    after = await scrape(proxy.url)
    assert after.value("dressage_pauses_total") == 1
    assert after.value("dressage_pause_tokens_total", fate="kept") == paused["tokens_kept"]
    assert after.value("dressage_pause_tokens_total", fate="discarded") == 0
    assert after.value("dressage_generations_total", outcome="responded") == 1
    assert after.value("dressage_generations_in_flight") == 0
    # Every token counted once: those before the pause and the continuation's.
    assert after.value("dressage_generated_tokens_total") == answer.usage.completion_tokens
    # The segment trains tokens of versions 1 and 3: a spread of 2.
    assert histogram_count(after, "dressage_segment_weight_version_spread") == 1
    assert after.value("dressage_segment_weight_version_spread_sum") == 2
    assert after.value("dressage_segment_weight_version_spread_bucket", le="1.0") == 0
    assert after.value("dressage_segment_weight_version_spread_bucket", le="2.0") == 1


async def test_metrics_pause_without_partial_rollout_discards_the_cut_tokens(start_proxy, mock_clock) -> None:
    proxy = await start_proxy(script=[{"session": "d", "output": WORDS}, {"session": "d", "output": WORDS}],
                              engine={"token_rate": 10.0})

    async def while_paused(rollout: ProxyClient, paused: dict[str, Any]) -> None:
        return None  # resume under the same version

    answer, paused = await answer_cut_by_a_pause(proxy, "d", while_paused)
    after = await scrape(proxy.url)
    # The restart from scratch threw the cut tokens away; the answer is the second try's.
    assert after.value("dressage_pause_tokens_total", fate="discarded") == paused["tokens_kept"]
    assert after.value("dressage_pause_tokens_total", fate="kept") == 0
    assert after.value("dressage_pause_generations_cut_total") == 1
    assert after.value("dressage_generated_tokens_total") == paused["tokens_kept"] + answer.usage.completion_tokens
    assert after.value("dressage_generations_total", outcome="responded") == 1


async def test_metrics_count_a_client_that_left_before_its_answer(start_proxy, mock_clock) -> None:
    proxy = await start_proxy(script=[{"session": "gone", "output": WORDS}], engine={"token_rate": 10.0})
    async with trio.open_nursery() as nursery:
        nursery.start_soon(proxy.chat, "gone", {"messages": [{"role": "user", "content": "count"}], **NO_THINKING})
        await proxy.engine.wait_until(lambda: any(len(s.output_ids) >= 3 for s in proxy.engine.active_requests()))
        nursery.cancel_scope.cancel()  # the client closes its connection before any answer
    for _ in range(100):  # the proxy notices the closed connection (virtual seconds: the clock autojumps)
        after = await scrape(proxy.url)
        if after.value("dressage_generations_in_flight") == 0:
            break
        await trio.sleep(1)
    assert after.value("dressage_generations_total", outcome="cancelled") == 1
    assert after.total("dressage_generations_total") == 1
    # No status was ever sent: counted as 499 (the client closed the request), under the route's rule.
    assert after.value("dressage_requests_total", endpoint=CHAT, protocol="chat_completions", status="499") == 1
    # A non-streaming client's upstream request answers at its end: no token was accepted, none is counted.
    assert after.value("dressage_generated_tokens_total") == 0
    assert histogram_count(after, "dressage_time_to_first_token_seconds") == 0


async def test_metrics_count_a_failed_tito_check_and_the_segment_it_began(start_proxy) -> None:
    proxy = await start_proxy(script=[{"session": "tf", "output": "one"}, {"session": "tf", "output": "two"}])
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hello"}]
    async with proxy.async_client() as client:
        first = await client.chat.completions.create(
            model="m", messages=messages, extra_headers=session_headers("tf"), extra_body=NO_THINKING)
        # Nothing after the checkpoint: the incremental encode has no fragment, and a full encode starts a segment.
        await client.chat.completions.create(
            model="m", messages=[*messages, assistant_echo(first.choices[0].message)],
            extra_headers=session_headers("tf"), extra_body=NO_THINKING)
    await proxy.finalize("tf")
    after = await scrape(proxy.url)
    assert after.value("dressage_tito_drift_audits_total", outcome="empty_fragment") == 1
    assert after.value("dressage_tito_drift_audits_total", outcome="ok") == 0
    assert after.value("dressage_segments_total", boundary_reason="session_start") == 1
    assert after.value("dressage_segments_total", boundary_reason="tito_failed") == 1
    assert histogram_count(after, "dressage_tokenization_seconds", where="inline") == 3  # the failed try included


async def test_metrics_time_a_long_context_tokenized_off_the_loop(start_proxy) -> None:
    proxy = await start_proxy()
    long_text = "word " * 2_000  # past the registry's inline bound (SessionConfig.thread_encode_chars)
    async with proxy.async_client() as client:
        await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": long_text}], max_tokens=4,
            extra_headers=session_headers("long"), extra_body=NO_THINKING)
    after = await scrape(proxy.url)
    assert histogram_count(after, "dressage_tokenization_seconds", where="off_loop") == 1
    assert histogram_count(after, "dressage_tokenization_seconds", where="inline") == 0
    assert after.value("dressage_tokenization_seconds_sum", where="off_loop") > 0


async def test_metrics_count_idle_finalizes_and_expired_tombstones(start_proxy, mock_clock) -> None:
    idle, ttl = 120.0, 600.0
    proxy = await start_proxy(session_idle_timeout=idle, tombstone_ttl=ttl)
    async with proxy.async_client() as client:
        await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hello"}], max_tokens=8,
            extra_headers=session_headers("idle"), extra_body=NO_THINKING)
    await trio.sleep(idle * 1.5)
    finalized = await scrape(proxy.url)
    assert finalized.value("dressage_sessions_finalized_total", reason="idle_timeout") == 1
    assert finalized.value("dressage_sessions_finalized_total", reason="requested") == 0
    assert finalized.value("dressage_sessions_evicted_total", kind="idle_finalized") == 1
    assert finalized.value("dressage_sessions_evicted_total", kind="tombstone_expired") == 0
    assert finalized.value("dressage_sessions", state="finalized") == 1
    drained = await proxy.post("/trajectory/read", {"session_id": "idle", "drain": True})
    acked = await proxy.post("/trajectory/ack", {"lease_id": drained.json()["lease_id"]})
    assert acked.json() == {"acknowledged": 1}
    await trio.sleep(ttl * 1.5)
    expired = await scrape(proxy.url)
    assert expired.value("dressage_sessions_evicted_total", kind="tombstone_expired") == 1
    assert expired.total("dressage_sessions") == 0


async def test_metrics_count_parser_mismatches_by_parser(start_proxy) -> None:
    # SGLang's parsers (the engine's, which reproduce 0.5.23) decide otherwise than the local ones on these outputs
    # (docs/parsing.md, differences 7 and 11): a <think> that does not start the output, and a JSON tool call
    # without its newline.
    call = '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'
    proxy = await start_proxy(
        script=[{"session": "r", "output": "Sure. <think>hm</think> done"}, {"session": "t", "output": call}],
        tool_call_parse_backend="sglang_api", reasoning_parse_backend="sglang_api",
    )
    async with proxy.async_client() as client:
        await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], extra_headers=session_headers("r"),
            extra_body=NO_THINKING)
        await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "add"}], tools=CALCULATOR_TOOLS,
            extra_headers=session_headers("t"), extra_body=NO_THINKING)
    after = await scrape(proxy.url)
    assert after.value("dressage_parser_mismatches_total", parser="reasoning") == 1
    assert after.value("dressage_parser_mismatches_total", parser="tool_call") == 1


async def test_metrics_need_the_admin_key_when_one_is_set(start_proxy) -> None:
    proxy = await start_proxy(admin_key="admin-secret", api_key="agent-secret")
    refused = await get_metrics(proxy.url)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
    wrong = await get_metrics(proxy.url, {"Authorization": "Bearer agent-secret"})
    assert wrong.status_code == 401
    allowed = await scrape(proxy.url, {"Authorization": "Bearer admin-secret"})
    # The refusals were counted under the route's rule, though the access rules answered before any route ran.
    assert allowed.value("dressage_requests_total", endpoint="/metrics", protocol="admin", status="401") == 2


async def test_no_metrics_serves_no_metrics_and_counts_nothing(start_proxy) -> None:
    on, off = await start_proxy(), await start_proxy(metrics=False)
    for proxy in (on, off):
        async with proxy.async_client() as client:
            answer = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hello"}], max_tokens=8,
                extra_headers=session_headers("s"), extra_body=NO_THINKING)
        assert answer.choices[0].message.content
    # The same traffic: counted with metrics on, ...
    counted = await scrape(on.url)
    assert counted.value("dressage_requests_total", endpoint=CHAT, protocol="chat_completions", status="200") == 1
    assert counted.value("dressage_generations_total", outcome="responded") == 1
    # ... a 404 like an unknown path with --no-metrics, ...
    response = await get_metrics(off.url)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    # ... where there is nothing to count into: the services hold the hooks that do nothing (no registry).
    metrics = off.handle.services.metrics
    assert metrics.enabled is False and not hasattr(metrics, "registry")
    assert on.handle.services.metrics.registry is not off.handle.services.metrics
