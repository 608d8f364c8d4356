"""The trajectory viewer's JSON (``/ui/api/``) and page files over HTTP, against a real proxy on its embedded engine
with the scripted multi-branch session of ``viewer_scenario.py``: the trie's shape, roles, checkpoints and boundary
reasons, live and finalized; the segments' tokens equal to ``/trajectory/read``'s; reading never drains."""

from __future__ import annotations

from typing import Any

import attrs
import httpx
import trio

from tests.e2e.conftest import start_proxy  # noqa: F401 - the e2e suite's fixture: a proxy on its embedded engine
from tests.ui import viewer_scenario as scenario

SESSION = "branchy/one"  # a "/" in the id: the API path carries it percent-encoded


async def get(proxy: Any, path: str, **headers: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=proxy.url, timeout=60) as client:
        return await client.get(path, headers=headers)


async def api_session(proxy: Any, session_id: str) -> dict[str, Any]:
    response = await get(proxy, "/ui/api/sessions/" + session_id.replace("/", "%2F"))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    return response.json()


async def read(proxy: Any, session_id: str) -> list[dict[str, Any]]:
    response = await proxy.post("/trajectory/read", {"session_id": session_id})
    assert response.status_code == 200, response.text
    return response.json()["data"]


def boundaries(trie: dict[str, Any]) -> dict[str, str]:
    """Node text -> boundary reason, for the nodes that show one."""
    return {node["text"]: node["boundary"]["reason"] for node in scenario.flatten(trie) if node["boundary"]}


def assert_tokens_match(view: dict[str, Any], segment: dict[str, Any], tito: Any) -> None:
    """The viewer's token strip is the segment's: ids, mask, logprobs where trained, and each token's text."""
    tokens = view["tokens"]
    assert tokens["ids"] == segment["token_ids"]
    assert tokens["mask"] == segment["loss_mask"]
    assert len(tokens["logprob"]) == len(tokens["version"]) == len(tokens["generated"]) == len(segment["token_ids"])
    assert segment["logprobs"] is not None
    for index, bit in enumerate(segment["loss_mask"]):
        if bit:
            assert tokens["logprob"][index] == segment["logprobs"][index]
    assert all(tokens["logprob"][i] is None for i, bit in enumerate(tokens["generated"]) if not bit)
    assert "".join(tokens["text"]) == tito.decode(segment["token_ids"])
    # Each step's first token is where its own ids begin (the step records of the concat build).
    offset = 0
    for drawn, record in zip(view["steps"], segment["steps"], strict=True):
        assert (drawn["step_id"], drawn["start"]) == (record["step_id"], offset)
        offset += len(record["concat_token_ids"])


async def test_live_session_shows_its_trie_and_a_preview_that_finalize_then_exports(start_proxy) -> None:
    proxy = await start_proxy(script=scenario.script(SESSION))
    await scenario.run_session(proxy, SESSION)

    listing = await get(proxy, "/ui/api/sessions")
    assert listing.status_code == 200
    rows = {row["session_id"]: row for row in listing.json()["sessions"]}
    assert listing.json()["source"]["kind"] == "proxy"
    row = rows[SESSION]
    assert (row["state"], row["live"], row["steps"], row["segments"], row["segments_preview"]) == (
        "live", True, 4, 3, True)

    live = await api_session(proxy, SESSION)
    assert live["trie"]["source"] == "trie"
    assert scenario.tree_shape(live["trie"]) == scenario.expected_tree()
    assert boundaries(live["trie"]) == {scenario.FIRST: "session_start", scenario.SUB_ANSWER: "new_conversation"}
    steps = {node["text"]: node["step"]["step_id"] for node in scenario.flatten(live["trie"]) if node["step"]}
    assert steps == {scenario.FIRST: 1, scenario.BRANCHES[0][1]: 2, scenario.BRANCHES[1][1]: 3,
                     scenario.SUB_ANSWER: 4}
    assert [len(context["children"]) for context in live["trie"]["contexts"]] == [2]
    previews = live["segments"]
    assert all(segment["preview"] for segment in previews)
    assert [segment["step_ids"] for segment in previews] == [[1, 2], [1, 3], [4]]
    # Past the export's thread threshold the views are built in a worker thread: the same answer.
    registry = proxy.handle.services.sessions
    registry.config = attrs.evolve(registry.config, thread_export_tokens=0)
    assert (await api_session(proxy, SESSION))["segments"] == previews

    # The viewer read nothing away and changed nothing: the session is still live, and still takes a finalize.
    assert (await proxy.debug(SESSION))["state"] == "ACTIVE"
    finalized = await proxy.finalize(SESSION)
    assert finalized["segments"] == 3
    segments = await read(proxy, SESSION)
    tito = proxy.tito
    for preview, segment in zip(previews, segments, strict=True):
        assert preview["trajectory_id"] == segment["trajectory_id"]
        assert preview["boundary_reason"] == segment["boundary_reason"]
        assert_tokens_match(preview, segment, tito)


async def test_finalized_session_shows_its_stored_segments_and_the_trie_rebuilt_from_them(start_proxy) -> None:
    proxy = await start_proxy(script=scenario.script(SESSION))
    await scenario.run_session(proxy, SESSION)
    await proxy.finalize(SESSION)

    rows = {row["session_id"]: row for row in (await get(proxy, "/ui/api/sessions")).json()["sessions"]}
    row = rows[SESSION]
    assert (row["state"], row["live"], row["segments"], row["segments_preview"]) == ("finalized", False, 3, False)
    segments = await read(proxy, SESSION)
    assert row["tokens"] == sum(len(segment["token_ids"]) for segment in segments)

    view = await api_session(proxy, SESSION)
    assert view["trie"]["source"] == "segments"
    assert scenario.tree_shape(view["trie"]) == scenario.expected_tree()
    assert boundaries(view["trie"]) == {scenario.FIRST: "session_start", scenario.SUB_ANSWER: "new_conversation"}
    drawn = view["segments"]
    assert [segment["trajectory_id"] for segment in drawn] == [segment["trajectory_id"] for segment in segments]
    assert [segment["forked_from_step"] for segment in drawn] == [None, 1, None]
    assert [segment["boundary_reason"] for segment in drawn] == ["session_start", "session_start", "new_conversation"]
    for view_segment, segment in zip(drawn, segments, strict=True):
        assert not view_segment["preview"]
        assert_tokens_match(view_segment, segment, proxy.tito)
    # Step 1 is trained in the first segment only: in the second its generated tokens are masked, no logprob.
    forked = drawn[1]
    first_step = forked["steps"][0]
    assert (first_step["step_id"], first_step["trained"]) == (1, False)
    generated = range(first_step["context"], first_step["context"] + first_step["output"])
    assert all(forked["tokens"]["generated"][i] == 1 and forked["tokens"]["mask"][i] == 0 for i in generated)

    # Reading for the viewer drained nothing: the trainer still gets every segment.
    assert await read(proxy, SESSION) == segments


async def test_unknown_session_is_404_and_drained_session_keeps_its_row(start_proxy) -> None:
    proxy = await start_proxy(script=scenario.script(SESSION))
    missing = await get(proxy, "/ui/api/sessions/nobody")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    await scenario.run_session(proxy, SESSION)
    await proxy.finalize(SESSION)
    drained = await proxy.post("/trajectory/read", {"session_id": SESSION, "drain": True})
    assert len(drained.json()["data"]) == 3
    acked = await proxy.post("/trajectory/ack", {"lease_id": drained.json()["lease_id"]})
    assert acked.json() == {"acknowledged": 3}
    view = await api_session(proxy, SESSION)
    assert (view["session"]["state"], view["trie"], view["segments"]) == ("drained", None, [])
    assert "drained" in view["note"]


async def test_the_page_and_its_files_are_served_with_their_media_types(start_proxy) -> None:
    proxy = await start_proxy()
    page = await get(proxy, "/ui/")
    assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-content-type-options"] == "nosniff"
    for needle in ('id="sessions"', 'id="trie"', 'id="segments"', 'id="token-tooltip"', 'src="static/viewer.js"',
                   'href="static/viewer.css"'):
        assert needle in page.text
    script = await get(proxy, "/ui/static/viewer.js")
    assert script.status_code == 200 and script.headers["content-type"] == "text/javascript; charset=utf-8"
    assert "session-row" in script.text and "step-boundary" in script.text
    style = await get(proxy, "/ui/static/viewer.css")
    assert style.status_code == 200 and style.headers["content-type"] == "text/css; charset=utf-8"
    assert "rgb(229, 231, 235)" in style.text
    bare = await get(proxy, "/ui")
    assert bare.status_code == 308 and bare.headers["location"].endswith("/ui/")
    for other in ("/ui/static/secrets.txt", "/ui/static/..%2Fviewer_routes.py"):
        refused = await get(proxy, other)
        assert refused.status_code == 404 and refused.json()["error"]["code"] == "not_found"


async def test_a_generation_in_flight_shows_as_a_pending_prompt_and_the_viewer_does_not_hold_it_up(
    start_proxy, nursery
) -> None:
    session = "in-flight"
    script = scenario.script(session)
    script[1] = {**script[1], "latency": 2.0}  # the second request waits upstream while the viewer looks
    proxy = await start_proxy(script=script)
    first, second = scenario.requests()[:2]
    assert (await proxy.chat(session, {"model": "m", "messages": first,
                                       "chat_template_kwargs": scenario.NO_THINKING})).status_code == 200
    done = trio.Event()

    async def ask_second() -> None:
        response = await proxy.chat(session, {"model": "m", "messages": second,
                                              "chat_template_kwargs": scenario.NO_THINKING})
        assert response.status_code == 200
        done.set()

    nursery.start_soon(ask_second)
    with trio.fail_after(30):
        while (view := await api_session(proxy, session))["session"]["in_flight"] != 1:
            await trio.sleep(0.02)
    assert not done.is_set()
    pending = {node["text"]: node["pending"] for node in scenario.flatten(view["trie"])}
    assert pending == {scenario.SYSTEM: False, scenario.QUESTION: False, scenario.FIRST: False,
                       scenario.BRANCHES[0][0]: True}
    assert [segment["step_ids"] for segment in view["segments"]] == [[1]]  # only committed steps are previewed
    with trio.fail_after(30):
        await done.wait()
    after = await api_session(proxy, session)
    assert not any(node["pending"] for node in scenario.flatten(after["trie"]))
    assert [segment["step_ids"] for segment in after["segments"]] == [[1, 2]]
