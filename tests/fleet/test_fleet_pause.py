"""Pause and resume reach every proxy of a fleet (issue 16 item 5): ``ProxyFleet`` fans out and combines the answers,
the state is kept in the shared store, and a proxy that joins during a pause starts paused.

The members are real proxies (``run_proxy`` over real sockets) sharing one ``InMemoryTrajectoryStore(shared=True)``,
as proxy processes share a PostgreSQL store (``test_fleet_balancer.py`` runs the processes)."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import trio

from proxy.client import ProxyClient
from proxy.fleet import ProxyFleet
from proxy.fleet_command import fleet_main
from proxy.trajectory.memory_store import InMemoryTrajectoryStore
from proxy.trajectory.store import ControlState

CHAT = {"model": "m", "messages": [{"role": "user", "content": "Say something."}], "max_tokens": 8}


def closed_port_url() -> str:
    """A loopback URL nobody listens on (a proxy that is down)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


async def test_pause_reaches_every_proxy_and_a_proxy_joining_during_it_starts_paused(start_member):
    store = InMemoryTrajectoryStore(shared=True)
    members = [await start_member(store) for _ in range(2)]
    async with ProxyFleet([m.url for m in members]) as fleet:
        paused = await fleet.pause()
    assert paused.ok and paused.failed == ()
    assert [o.answer["state"] for o in paused.outcomes] == ["PAUSED", "PAUSED"]
    assert all(o.answer["fleet_recorded"] for o in paused.outcomes)
    assert (await store.control()).paused

    # A third proxy starts now: it is paused from its first request on.
    joined = await start_member(store)
    async with ProxyClient(joined.url) as client:
        assert (await client.pause_state()).state == "PAUSED"
        answers: list[dict] = []

        async def chat() -> None:
            answers.append(await client.chat_completions(CHAT, session_id="joined-1"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(chat)
            # The request waits at the gate until the fleet's resume reaches this proxy too.
            with trio.fail_after(30):
                while (await client.pause_state()).waiting != 1:
                    await trio.sleep(0.02)
            assert answers == []
            async with ProxyFleet([m.url for m in [*members, joined]]) as fleet:
                resumed = await fleet.resume(weight_version="v2")
        assert resumed.ok and resumed.weight_version == "v2"
        assert [o.answer["state"] for o in resumed.outcomes] == ["RUNNING"] * 3
        assert [answer["object"] for answer in answers] == ["chat.completion"]
    assert await store.control() == ControlState(paused=False, weight_version="v2")
    # And a proxy that joins now starts running, with the fleet's weight version.
    late = await start_member(store)
    async with ProxyClient(late.url) as client:
        state = await client.pause_state()
    assert (state.state, state.weight_version) == ("RUNNING", "v2")


async def test_a_proxy_that_is_down_is_named_in_the_combined_result(start_member):
    store = InMemoryTrajectoryStore(shared=True)
    member = await start_member(store)
    down = closed_port_url()
    async with ProxyFleet([member.url, down]) as fleet:
        result = await fleet.pause()
    assert not result.ok and result.failed == (down,)
    assert result.outcomes[0].ok and result.outcomes[1].code == "proxy_unreachable"
    assert result.as_json()["failed"] == [down]


async def test_the_fleet_command_prints_the_combined_result_and_fails_when_a_proxy_did(start_member, capsys):
    store = InMemoryTrajectoryStore(shared=True)
    members = [await start_member(store) for _ in range(2)]
    urls = ",".join(m.url for m in members)
    assert await trio.to_thread.run_sync(fleet_main, ["pause", "--urls", urls]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["ok"] and [p["answer"]["state"] for p in printed["proxies"]] == ["PAUSED", "PAUSED"]
    assert await trio.to_thread.run_sync(
        fleet_main, ["resume", "--urls", f"{urls},{closed_port_url()}", "--weight-version", "v7"]) == 1
    printed = json.loads(capsys.readouterr().out)
    assert not printed["ok"] and len(printed["failed"]) == 1 and printed["weight_version"] == "v7"
    async with httpx.AsyncClient() as client:
        states = [(await client.get(m.url + "/v1/rollout/pause_state")).json() for m in members]
    assert [(s["state"], s["weight_version"]) for s in states] == [("RUNNING", "v7")] * 2


def test_dressage_proxy_fleet_is_a_subcommand_that_exits_1_when_a_proxy_is_down():
    exe = Path(sys.executable).parent / "dressage-proxy"
    down = closed_port_url()
    run = subprocess.run([str(exe), "fleet", "pause", "--urls", down], capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stderr
    printed = json.loads(run.stdout)
    assert (printed["ok"], printed["failed"]) == (False, [down])
    assert printed["proxies"][0]["code"] == "proxy_unreachable"
    bad = subprocess.run([str(exe), "fleet", "pause", "--urls", "not-a-url"], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "not an http(s) URL" in bad.stderr


async def test_proxy_fleet_runs_under_asyncio_too(start_member):
    store = InMemoryTrajectoryStore(shared=True)
    members = [await start_member(store) for _ in range(2)]

    async def pause_and_resume() -> tuple[bool, bool]:
        async with ProxyFleet([m.url for m in members]) as fleet:
            return (await fleet.pause()).ok, (await fleet.resume()).ok

    assert await trio.to_thread.run_sync(lambda: asyncio.run(pause_and_resume())) == (True, True)
    assert await store.control() == ControlState(paused=False, weight_version=None)
