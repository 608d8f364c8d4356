"""The fleet (issue 16 item 5): proxy processes sharing a real PostgreSQL store behind a real HAProxy that hashes the
session header; one proxy is killed (SIGKILL) mid-run, the fleet is paused and resumed through ``ProxyFleet``, and a
proxy that starts during the pause starts paused and joins the balancer's ring.

- PostgreSQL: ``tests/postgres_server.py`` (Debian's package); HAProxy: Debian's ``haproxy`` package
  (``tests/debian_packages.py``), with a generated configuration on 127.0.0.1 ports: ``balance hdr(X-Session-Id)``
  and ``hash-type consistent``, health checks every 500 ms. Either missing skips LOUDLY with the reason.
- One upstream: the embedded engine served in this process on 127.0.0.1:0; every proxy process gets it as
  ``--sglang-router-url``.
- 64 agents of a few turns each, through the balancer; an agent retries a request that failed on the way (a
  connection cut by the kill, HAProxy's 502/503, ``session_busy``, ``session_moved``), after ``Retry-After`` when
  the answer has one, with the same ``Idempotency-Key``.

Exactness: after every agent finished, each session is finalized and read back through the balancer: it has exactly
the agent's turns as steps (0 lost, 0 duplicated), one segment, and the segment's token ids are the last request's
prompt ids followed by its generated ids (the trajectory is the conversation the agent had, token for token).
Bounded: every wait has a bound (a hang guard, not a performance threshold).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio

from engine import EngineConfig, serve_engine
from proxy.fleet import ProxyFleet
from tests.debian_packages import PackageUnavailable, ensure_installed
from tests.postgres_server import postgres_server  # noqa: F401  (the fixture)

EXE = Path(sys.executable).parent / "dressage-proxy"
HAPROXY = Path("/usr/sbin/haproxy")
AGENTS = 64
TURNS = 4
#: short leases: a killed proxy's sessions move after at most this long
LEASE_SECONDS = 3.0
#: hang guards, not performance bounds (2 shared cores, 4 proxy processes starting)
START_BOUND = 240.0
RUN_BOUND = 600.0
#: statuses an agent retries: the balancer's (no server, server gone), the fleet's (busy, moved), a cut upstream
RETRIED = frozenset({409, 502, 503, 504})
#: an agent waits at most this long between two attempts, whatever Retry-After says
MAX_BACKOFF = 2.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def haproxy_config(port: int, proxy_ports: list[int]) -> str:
    """A balancer on 127.0.0.1:``port`` hashing the session header onto the proxies (consistent hashing: a proxy
    that goes or comes moves only its share of the sessions)."""
    servers = "\n".join(
        f"    server proxy{index} 127.0.0.1:{proxy_port} check inter 500ms fall 2 rise 1"
        for index, proxy_port in enumerate(proxy_ports)
    )
    return f"""global
    maxconn 4096

defaults
    mode http
    timeout connect 2s
    timeout client 300s
    timeout server 300s
    timeout check 5s
    retries 2
    option redispatch

frontend sessions
    bind 127.0.0.1:{port}
    default_backend proxies

backend proxies
    balance hdr(X-Session-Id)
    hash-type consistent
    option httpchk GET /health
{servers}
"""


@attrs.define(eq=False)
class Member:
    """One proxy process of the fleet."""

    index: int
    port: int
    process: trio.Process
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, lines: int = 30) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


@attrs.define(eq=False)
class Fleet:
    """What the test started: the members (by index), the balancer, the store."""

    tmp_path: Path
    store_url: str
    engine_url: str
    tokenizer_path: Path
    ports: list[int]
    nursery: trio.Nursery
    members: dict[int, Member] = attrs.field(factory=dict)

    async def start_member(self, index: int) -> Member:
        log_path = self.tmp_path / f"proxy{index}.log"
        command = [
            str(EXE), "--host", "127.0.0.1", "--port", str(self.ports[index]), "--store", self.store_url,
            "--sglang-router-url", self.engine_url, "--tokenizer-path", str(self.tokenizer_path),
            "--proxy-id", f"proxy{index}", "--session-lease-seconds", str(LEASE_SECONDS),
            "--dressage-partial-rollout", "--log-level", "warning",
        ]
        env = {key: value for key, value in os.environ.items() if not key.startswith("DRESSAGE_PROXY_")}
        with log_path.open("wb") as log_file:
            process = await trio.lowlevel.open_process(command, stdout=log_file, stderr=subprocess.STDOUT, env=env)
        member = Member(index, self.ports[index], process, log_path)
        self.members[index] = member
        await until_healthy(member)
        return member

    def kill(self, index: int) -> None:
        self.members.pop(index).process.send_signal(signal.SIGKILL)

    def alive_urls(self) -> list[str]:
        return [member.url for _, member in sorted(self.members.items())]

    def stop_all(self) -> None:
        for member in self.members.values():
            if member.process.returncode is None:
                member.process.kill()

    def log_tails(self) -> str:
        return "\n".join(f"--- proxy{m.index}\n{m.log_tail()}" for m in self.members.values())


async def until_healthy(member: Member) -> None:
    async with httpx.AsyncClient(timeout=5.0) as client:
        with trio.fail_after(START_BOUND):
            while True:
                if member.process.returncode is not None:
                    pytest.fail(f"proxy{member.index} exited at start-up ({member.process.returncode}):\n"
                                f"{member.log_tail()}")
                try:
                    if (await client.get(member.url + "/health")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await trio.sleep(0.2)


async def until_balanced(url: str) -> None:
    """The balancer answers (some proxy behind it is up)."""
    async with httpx.AsyncClient(timeout=5.0) as client:
        with trio.fail_after(START_BOUND):
            while True:
                try:
                    if (await client.get(url + "/health", headers={"X-Session-Id": "probe"})).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await trio.sleep(0.2)


@attrs.define(eq=False)
class Progress:
    """Turns completed by all agents, and events waiting for thresholds."""

    done: int = 0
    retries: int = 0
    retried_statuses: dict[str, int] = attrs.field(factory=dict)
    waiters: list[tuple[int, trio.Event]] = attrs.field(factory=list)

    def turn_done(self) -> None:
        self.done += 1
        for threshold, event in self.waiters:
            if self.done >= threshold:
                event.set()

    async def until(self, threshold: int) -> None:
        event = trio.Event()
        self.waiters.append((threshold, event))
        if self.done >= threshold:
            event.set()
        await event.wait()


async def post_until_done(client: httpx.AsyncClient, path: str, body: dict[str, Any], session: str,
                          progress: Progress, key: str | None = None) -> dict[str, Any]:
    """POST through the balancer; retry what a fleet in motion answers (see RETRIED), after Retry-After."""
    headers = {"X-Session-Id": session, **({"Idempotency-Key": key} if key else {})}
    for _ in range(200):
        try:
            response = await client.post(path, json=body, headers=headers)
        except httpx.TransportError as exc:
            progress.retries += 1
            progress.retried_statuses[type(exc).__name__] = progress.retried_statuses.get(type(exc).__name__, 0) + 1
            await trio.sleep(0.2)
            continue
        if response.status_code == 200:
            return response.json()
        if response.status_code not in RETRIED:
            raise AssertionError(f"{path} of {session}: {response.status_code} {response.text}")
        progress.retries += 1
        label = str(response.status_code)
        if response.headers.get("content-type", "").startswith("application/json"):
            label += " " + str(response.json().get("error", {}).get("code"))
        progress.retried_statuses[label] = progress.retried_statuses.get(label, 0) + 1
        await trio.sleep(min(MAX_BACKOFF, float(response.headers.get("Retry-After") or 0.2)))
    raise AssertionError(f"{path} of {session}: still failing after 200 attempts")


@attrs.define(eq=False)
class Agent:
    """One scripted conversation: TURNS user turns, the assistant's answers echoed back."""

    session: str
    messages: list[dict[str, Any]] = attrs.field(factory=list)
    last_prompt_ids: list[int] = attrs.field(factory=list)
    last_output_ids: list[int] = attrs.field(factory=list)

    async def run(self, client: httpx.AsyncClient, progress: Progress) -> None:
        self.messages.append({"role": "user", "content": f"Conversation {self.session}: tell me something."})
        for turn in range(TURNS):
            body = {"model": "m", "messages": self.messages, "max_tokens": 256, "return_token_ids": True}
            answer = await post_until_done(client, "/v1/chat/completions", body, self.session, progress,
                                           key=f"{self.session}-turn-{turn}")
            choice = answer["choices"][0]
            self.last_prompt_ids = list(answer["prompt_token_ids"])
            self.last_output_ids = list(answer["token_ids"])
            self.messages.append({"role": "assistant", "content": choice["message"]["content"]})
            if turn < TURNS - 1:
                self.messages.append({"role": "user", "content": f"And then, after turn {turn}?"})
            progress.turn_done()


@pytest.fixture
def haproxy() -> Path:
    try:
        return ensure_installed("haproxy", HAPROXY, lambda line: print(line, file=sys.stderr))
    except PackageUnavailable as exc:
        pytest.skip(f"SKIPPED LOUDLY: no HAProxy, the fleet test behind a load balancer did not run: {exc}")


async def test_a_fleet_behind_haproxy_loses_and_duplicates_nothing_when_a_proxy_is_killed(
    tmp_path: Path, postgres_server, haproxy: Path, qwen3_path: Path, nursery: trio.Nursery,  # noqa: F811
):
    engine = await nursery.start(serve_engine, EngineConfig(port=0, tokenizer_path=qwen3_path))
    store_url = postgres_server.fresh_database("fleet")
    ports = [free_port() for _ in range(4)]
    balancer_port = free_port()
    fleet = Fleet(tmp_path, store_url, engine.url, qwen3_path, ports, nursery)
    config_path = tmp_path / "haproxy.cfg"
    # Four servers: proxy3 is down (not started) until the pause; the balancer's health checks add it then.
    config_path.write_text(haproxy_config(balancer_port, ports))
    balancer = await trio.lowlevel.open_process([str(haproxy), "-f", str(config_path), "-db"],
                                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    progress = Progress()
    agents = [Agent(f"fleet-{index:02d}") for index in range(AGENTS)]
    total = AGENTS * TURNS
    try:
        for index in range(3):
            await fleet.start_member(index)
        balanced = f"http://127.0.0.1:{balancer_port}"
        await until_balanced(balanced)
        with trio.fail_after(RUN_BOUND):
            async with httpx.AsyncClient(base_url=balanced, timeout=httpx.Timeout(300.0, connect=5.0),
                                         limits=httpx.Limits(max_connections=AGENTS)) as client:
                async with trio.open_nursery() as agents_nursery:
                    for agent in agents:
                        agents_nursery.start_soon(agent.run, client, progress)
                    # A quarter of the way: kill -9 one proxy, in the middle of its generations and commits.
                    await progress.until(total // 4)
                    fleet.kill(0)
                    # Half-way: pause every live proxy, start a fourth one (it must start paused), resume them all.
                    await progress.until(total // 2)
                    async with ProxyFleet(fleet.alive_urls()) as proxies:
                        paused = await proxies.pause()
                    assert paused.ok, paused.as_json()
                    joined = await fleet.start_member(3)
                    async with httpx.AsyncClient() as probe:
                        state = (await probe.get(joined.url + "/v1/rollout/pause_state")).json()
                    assert state["state"] == "PAUSED", state
                    async with ProxyFleet(fleet.alive_urls()) as proxies:
                        resumed = await proxies.resume()
                    assert resumed.ok and len(resumed.outcomes) == 3, resumed.as_json()
                assert progress.done == total
                # Every session, finalized and read back through the balancer: exactly the agent's conversation.
                for agent in agents:
                    result = await post_until_done(client, "/session/finalize", {"session_id": agent.session},
                                                   agent.session, progress)
                    assert (result["steps"], result["segments"]) == (TURNS, 1), (agent.session, result)
                    read = await post_until_done(client, "/trajectory/read", {"session_id": agent.session},
                                                 agent.session, progress)
                    (segment,) = read["data"]
                    assert len(segment["steps"]) == TURNS, agent.session
                    assert segment["token_ids"][: len(agent.last_prompt_ids)] == agent.last_prompt_ids, agent.session
                    assert segment["token_ids"][len(agent.last_prompt_ids):] == agent.last_output_ids, agent.session
        print(f"fleet: {total} turns by {AGENTS} agents, {progress.retries} retried attempts: "
              f"{progress.retried_statuses}")
    except BaseException:
        print(fleet.log_tails(), file=sys.stderr)
        raise
    finally:
        fleet.stop_all()
        balancer.kill()
