"""Failed requests leave no residue: every failure path puts the session's trie back exactly as it was.

A generation that fails (refused after its prompt was attached, dropped after an upstream failure or a client gone,
refused at commit, cancelled during prepare) removes exactly the pending nodes it created, its context node if it
created one, and its entry in the shared-encoding cache; pending nodes a concurrent generation still needs stay
until that one ends too. "Exactly" is checked on the trie's whole shape (every node, its key, variant,
checkpoint, commit count, pending flag and encodings), not only on its counters.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
import trio

from proxy.controllers.session_registry import SessionRegistry
from proxy.tokenization import TitoError
from proxy.trajectory.prefix_trie import PrefixTrie, TrieNode
from proxy.trajectory.session_config import SessionConfig
from proxy.trajectory.session_errors import ResponseMaskMismatchError, TrajectoryVersionChangedError
from proxy.trajectory.version_stamp import VersionStamp

from .driving import turn
from .fakes import FakeTokenizer, model_output

SYS = {"role": "system", "content": "You are terse."}
U1 = {"role": "user", "content": "add 5 and 3"}
A1 = {"role": "assistant", "content": "It is 8."}
U2 = {"role": "user", "content": "and 6 and 7?"}
A2 = {"role": "assistant", "content": "13."}
TOOLS = [{"type": "function", "function": {"name": "add"}}]


def registry(tokenizer: Any = None, **config: Any) -> SessionRegistry:
    config.setdefault("max_steps_per_session", None)
    return SessionRegistry(tokenizer or FakeTokenizer(), config=SessionConfig(**config))


def node_shape(node: TrieNode) -> tuple:
    """A node and everything below it, as comparable data."""
    step = node.checkpoint.step_id if node.checkpoint is not None else None
    encodings = None if node.encodings is None else sorted(
        (repr(signature), tuple(ids), holders) for signature, (ids, holders) in node.encodings.items()
    )
    children = sorted((node_shape(child) for child in node.child_variants()), key=repr)
    return (node.kind.name, repr(node.key), node.variant, step, node.commits, node.committed_below, encodings,
            children)


def trie_of(reg: SessionRegistry, session_id: str = "s") -> PrefixTrie:
    trie = reg._sessions[session_id].session.trie
    assert trie is not None
    return trie


def shape(reg: SessionRegistry, session_id: str = "s") -> tuple:
    """The trie's whole shape and its counters."""
    trie = trie_of(reg, session_id)
    return node_shape(trie.root), trie.statistics(), trie.holds


async def one_committed_step(reg: SessionRegistry) -> tuple:
    await turn(reg, "s", [SYS, U1], A1)
    return shape(reg)


async def test_residue_drop_after_an_upstream_failure_removes_the_pending_suffix():
    reg = registry()
    before = await one_committed_step(reg)
    # A long suffix (the 10^5-message request, scaled down): every one of its nodes goes.
    history = [SYS, U1, A1] + [{"role": "user", "content": f"m{i}"} for i in range(1000)]
    prepared = await reg.prepare("s", history)
    assert reg.debug_view("s").trie.pending == 1000
    await reg.drop(prepared.handle)
    assert shape(reg) == before


async def test_residue_prepare_refusal_after_the_prompt_was_attached_leaves_nothing():
    reg = registry()
    before = await one_committed_step(reg)
    # The mask check comes after the trie walk and the tokenization.
    with pytest.raises(ResponseMaskMismatchError):
        await reg.prepare("s", [SYS, U1, A1, U2], response_mask=[1])
    assert shape(reg) == before
    # A full encode that fails (a template refusal), with a new context node (tools) that must go as well.
    with pytest.raises(TitoError):
        await reg.prepare("s", [SYS, {"role": "user", "content": "FULL-FAIL"}], tools=TOOLS)
    assert shape(reg) == before
    # A TITO failure moves the generation to a full encode, which fails too.
    with pytest.raises(TitoError):
        await reg.prepare("s", [SYS, U1, A1, {"role": "user", "content": "TITO-FAIL and FULL-FAIL"}])
    assert shape(reg) == before


async def test_residue_commit_refused_for_a_version_change_then_dropped_leaves_nothing():
    reg = registry()
    prepared = await reg.prepare("s", [SYS, U1])
    ids = model_output(A1)
    await reg.commit(prepared.handle, ids, None, None, None, "stop", A1, version_stamp=VersionStamp(0, "v0"))
    before = shape(reg)
    prepared = await reg.prepare("s", [SYS, U1, A1, U2])
    with pytest.raises(TrajectoryVersionChangedError):
        await reg.commit(prepared.handle, model_output(A2), None, None, None, "stop", A2,
                         version_stamp=VersionStamp(1, "v1"))
    await reg.drop(prepared.handle)
    assert shape(reg) == before


async def test_residue_cancelled_during_a_threaded_encode_leaves_nothing():
    started, release = threading.Event(), threading.Event()

    class BlockingTokenizer(FakeTokenizer):
        def encode_incremental(self, *args: Any, **kwargs: Any) -> Any:
            started.set()
            release.wait(5)
            return super().encode_incremental(*args, **kwargs)

    reg = registry(BlockingTokenizer(), thread_encode_chars=0)
    before = await one_committed_step(reg)
    with trio.move_on_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reg.prepare, "s", [SYS, U1, A1, U2, {"role": "user", "content": "more"}])
            await trio.to_thread.run_sync(started.wait)
            nursery.cancel_scope.cancel()
            release.set()
    assert shape(reg) == before


async def test_residue_shared_pending_nodes_stay_until_every_generation_holding_them_ended():
    """Concurrent generations share pending nodes: the first to fail must not take what the other still needs."""
    for order in ("extension first", "base first"):
        reg = registry()
        before = await one_committed_step(reg)
        # base: the answer to U2 is in flight; extension: a request that already continues past it (the agent's
        # history holds a reply the proxy has not committed, a warm start) and so extends base's pending nodes.
        base = await reg.prepare("s", [SYS, U1, A1, U2])
        after_base = shape(reg)
        extension = await reg.prepare("s", [SYS, U1, A1, U2, A2, {"role": "user", "content": "then?"}])
        first, second = (extension, base) if order == "extension first" else (base, extension)
        await reg.drop(first.handle)
        if order == "extension first":
            assert shape(reg) == after_base
        else:
            # U2 stays: the extension's pending path runs through it.
            assert reg.debug_view("s").trie.pending == 3
        await reg.drop(second.handle)
        assert shape(reg) == before, order


async def test_residue_samples_of_one_prompt_share_its_encoding_and_the_failed_ones_give_it_back():
    reg = registry()
    await one_committed_step(reg)
    prompt = [SYS, {"role": "user", "content": "x" * 200}]
    samples = [await reg.prepare("s", prompt) for _ in range(3)]
    assert len({id(p.tokens.context.context_ids) for p in samples}) == 1
    answer = {"role": "assistant", "content": "kept"}
    await reg.commit(samples[1].handle, model_output(answer), None, None, None, "stop", answer)
    for failed in (samples[0], samples[2]):
        await reg.drop(failed.handle)
    # The result equals the session that only ever ran the committed sample.
    control = registry()
    await one_committed_step(control)
    kept = await control.prepare("s", prompt)
    await control.commit(kept.handle, model_output(answer), None, None, None, "stop", answer)
    assert shape(reg) == shape(control)


async def test_residue_failed_requests_do_not_change_the_boundary_reason_or_the_instance_id():
    """As if the failed request had never been made: the retry of a failed first request is not a resample, and
    the failed request's instance id does not stick to the session."""
    reg = registry()
    failed = await reg.prepare("s", [SYS, U1], instance_id="failed-instance")
    await reg.drop(failed.handle)
    assert reg.debug_view("s").instance_id is None
    retry = await turn(reg, "s", [SYS, U1], A1)
    assert retry.prepared.boundary_reason == "session_start"
    again = await reg.prepare("s", [SYS, {"role": "user", "content": "other"}])
    await reg.drop(again.handle)
    fresh = await turn(reg, "s", [SYS, {"role": "user", "content": "other"}], A2)
    assert fresh.prepared.boundary_reason == "history_rewritten"
    await reg.finalize("s")
    assert {segment["instance_id"] for segment in await reg.read(session_id="s")} == {None}
