"""Hypothesis-generated bodies for the rollout endpoints: never a 5xx, always the OpenAI error shape, and a stored
session the bodies do not name is never changed (nor leased: a draining read of it still gets every segment).

One proxy serves every example (``ProxyThread``: its own trio run in a background thread; the examples are sync).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .harness import ProxyThread, record_calculator_session

KEPT = "kept-session"

_ids = st.one_of(
    st.sampled_from(["s1", "s2", "s1:0", "s2:0", "s1:1", ""]),
    st.text(max_size=8),
    st.integers(-3, 2**70),
).filter(lambda value: value != KEPT and not str(value).startswith(KEPT))
_leaves = st.none() | st.booleans() | st.floats(allow_nan=False) | st.integers() | st.text(max_size=6) | _ids
_json = st.recursive(_leaves, lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids,
                                                                                        max_size=3), max_leaves=6)
# Lease ids: the shape the memory store makes (lease-<n>-<hex>), near misses, anything.
_lease_ids = st.one_of(st.sampled_from(["lease-0", "lease-1-0", "lease-", " lease-1 ", "x" * 300]),
                       st.builds(lambda n, h: f"lease-{n}-{h:x}", st.integers(0, 50), st.integers(0, 2**48)),
                       st.text(max_size=8), st.integers(-3, 2**70))
_fields = {"session_id": _ids | _json, "trajectory_id": _ids | _json, "instance_id": _ids | _json,
           "rollout_id": _ids, "reward_info": _json, "drain": st.booleans() | _json,
           "lease_id": _lease_ids | _json}
_bodies = st.one_of(
    st.binary(max_size=24),
    _json.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries({}, optional=_fields).map(lambda d: json.dumps(d).encode()),
    st.just(b'{"session_id": "s", "reward_info": {"a": ' * 120 + b"1" + b"}" * 240),
)
_requests = st.one_of(
    st.tuples(st.sampled_from(["/session/finalize", "/trajectory/read", "/trajectory/ack"]), _bodies),
    st.tuples(st.just("GET /session/"), st.text(max_size=10).filter(lambda s: not s.startswith(KEPT))),
    st.tuples(st.just("GET /trajectory/stats"), st.just(b"")),
)


@pytest.fixture(scope="module")
def proxy(qwen3_path: Path) -> Iterator[ProxyThread]:
    with ProxyThread(qwen3_path) as running:
        running.call(record_calculator_session, running.stack.services, KEPT)
        running.call(running.stack.services.sessions.finalize, KEPT)
        yield running


@pytest.fixture(scope="module")
def http(proxy: ProxyThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=proxy.stack.url) as client:
        yield client


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(requests=st.lists(_requests, min_size=1, max_size=5))
def test_rollout_endpoints_never_5xx_and_never_touch_other_sessions(http: httpx.Client, requests) -> None:
    before = http.post("/trajectory/read", json={"session_id": KEPT}).json()
    for target, body in requests:
        if target == "GET /session/":
            r = http.get("/session/" + quote(body, safe="/"))
        elif target.startswith("GET "):
            r = http.get(target[4:])
        else:
            r = http.post(target, content=body, headers={"Content-Type": "application/json"})
        assert r.status_code < 500, (target, body, r.text)
        if r.status_code >= 400:
            error = r.json()["error"]
            assert set(error) >= {"message", "type", "param", "code"} and error["code"], error
            assert r.status_code in (400, 404, 405, 409), (target, body, r.text)
    assert http.post("/trajectory/read", json={"session_id": KEPT}).json() == before
    # The kept session's segment is the only one stored (the bodies finalize no session with steps): a lease of
    # anything is a lease of it.
    assert http.get("/trajectory/stats").json()["leased_segments"] == 0
