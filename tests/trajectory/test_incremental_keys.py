"""Incremental message keys (issue 21 item 4): a turn keys only the messages its session does not hold yet, and an
earlier message that changed in any way a key can see is still keyed, and matched, exactly as a full keying would.

The session core runs with a fake TITO tokenizer (the trie and the keys are what is tested, not tokenization).
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import proxy.trajectory.encode_plan as encode_plan
from proxy.tokenization import TitoFragment
from proxy.trajectory.encode_plan import request_keys, tokenize_plan
from proxy.trajectory.message_keys import message_key, reasoning_variant, same_message
from proxy.trajectory.session import Session
from proxy.trajectory.session_config import SessionConfig

EOT = 1


class FakeTokenizer:
    end_of_turn_id = EOT

    def encode_full(self, messages, tools=None, kwargs=None):
        return [100 + len(messages)] * 4

    def encode_incremental(self, checkpoint, new, **_):
        return TitoFragment(ids=(200, 201), text="")


def tool_call(call_id, args):
    return {"id": call_id, "type": "function", "function": {"name": "lookup", "arguments": args}}


def history(turns):
    """A conversation of ``turns`` answered turns, with tool calls, reasoning and list content on the way."""
    messages = [{"role": "system", "content": "You help."}]
    for turn in range(turns):
        if turn % 3 == 1:
            messages.append({"role": "user", "content": [{"type": "text", "text": f"part {turn}"},
                                                         {"type": "text", "text": " more"}]})
        else:
            messages.append({"role": "user", "content": f"question {turn}", "name": "alice"})
        messages.append(None)  # the answer, filled in by grow()
    return messages


def answer(turn, cch=True):
    """An answer; with ``cch``, one holding billing hashes (blanked in its key under ignore_cch)."""
    mark = " cch=zz9" if cch else ""
    if turn % 2:  # every other one's reasoning, or its call's arguments, long enough to be held packed
        reasoning = f"think {turn} " * (150 if turn % 4 == 1 else 1)
        arguments = {"n": turn, "x": 1.5, "ok": True, "cch": mark,
                     "doc": "lorem ipsum " * (100 if turn % 4 == 3 else 0)}
        return {"role": "assistant", "content": "", "reasoning_content": reasoning,
                "tool_calls": [tool_call(f"c{turn}", arguments)]}
    return {"role": "assistant", "content": f"answer {turn}{mark}"}


def grow(session, tokenizer, turns, cch=True):
    """Commit ``turns`` turns, each request sending the whole history with the answers echoed as stored."""
    messages = [{"role": "system", "content": "You help."}]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"question {turn}", "name": "alice"} if turn % 3 != 1 else
                        {"role": "user", "content": [{"type": "text", "text": f"part {turn}"},
                                                     {"type": "text", "text": " more"}]})
        if turn % 4 == 3:
            messages.append({"role": "tool", "tool_call_id": f"c{turn - 2}", "content": f"result {turn}"})
        request = copy.deepcopy(messages)  # a fresh parse of the client's body, as each HTTP request is
        handle, plan = session.prepare(request)
        session.set_context(handle, tokenize_plan(tokenizer, plan))
        reply = answer(turn, cch)
        span = Session.build_span(handle, [7, EOT], [-0.5, -0.25], ["v1", "v1"], ())
        # Keyed as the registry keys a commit: under the session's ignore_cch.
        key = message_key(reply, ignore_cch=session.config.ignore_cch_for_prefix_hash)
        session.commit(handle, span, finish_reason="stop", assistant_message=reply, key=key,
                       variant=reasoning_variant(reply), logprobs_invalid=False)
        messages.append(copy.deepcopy(reply))
    return messages


def new_session(ignore_cch=False):
    return Session("s", SessionConfig(max_steps_per_session=None, ignore_cch_for_prefix_hash=ignore_cch), EOT)


def full_keys(messages, ignore_cch=False):
    return request_keys(messages, ignore_cch=ignore_cch)


@pytest.mark.parametrize("ignore_cch", [False, True])
def test_a_turn_keys_only_the_messages_its_session_does_not_hold(monkeypatch, ignore_cch):
    """Fails before incremental keys: every request keyed its whole history (O(turns) per turn)."""
    session, tokenizer = new_session(ignore_cch), FakeTokenizer()
    messages = grow(session, tokenizer, 30, cch=False)
    request = copy.deepcopy(messages) + [{"role": "user", "content": "next"}]
    calls: list = []
    real = encode_plan.message_key

    def counting(message, **kwargs):
        calls.append(message)
        return real(message, **kwargs)

    monkeypatch.setattr(encode_plan, "message_key", counting)
    keys, variants = session.request_keys(request)
    calls = list(calls)
    monkeypatch.undo()
    assert (keys, variants) == full_keys(request, ignore_cch)
    assert calls == [{"role": "user", "content": "next"}]


# Changes a key can see (and some it cannot): each must give exactly the keys (and variants) a full keying gives.
_CHANGES = [
    lambda m: m.__setitem__("content", (m.get("content") or "") + "!") if isinstance(m.get("content"), str) else None,
    lambda m: m.__setitem__("name", "bob"),
    lambda m: m.__setitem__("extra_field", 1),
    lambda m: m.pop("name", None),
    lambda m: m.__setitem__("reasoning_content", "other thoughts"),
    lambda m: m.pop("reasoning_content", None),
    lambda m: m.__setitem__("content", None) if m.get("content") == "" else None,
    lambda m: m.__setitem__("content", [{"type": "text", "text": m["content"]}]) if isinstance(m.get("content"),
                                                                                                str) else None,
    lambda m: [call["function"]["arguments"].__setitem__("n", float(call["function"]["arguments"]["n"]))
               for call in m.get("tool_calls") or ()],
    lambda m: [call["function"]["arguments"].__setitem__("ok", 1) for call in m.get("tool_calls") or ()],
    lambda m: [call["function"]["arguments"].__setitem__("x", -0.0) for call in m.get("tool_calls") or ()],
    lambda m: [call["function"]["arguments"].__setitem__("cch", "cch=other") for call in m.get("tool_calls") or ()],
    lambda m: [call.__setitem__("id", "renamed") for call in m.get("tool_calls") or ()],
    lambda m: m.__setitem__("content", m["content"].replace("cch=zz9", "cch=yy8"))
    if isinstance(m.get("content"), str) else None,
    lambda m: m.__setitem__("tool_call_id", "c0"),
    lambda m: m.__setitem__("role", "user"),
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=st.integers(1, 12), position=st.integers(0, 40), change=st.sampled_from(range(len(_CHANGES))),
       ignore_cch=st.booleans())
def test_a_changed_earlier_message_is_keyed_and_matched_exactly(turns, position, change, ignore_cch):
    session, tokenizer = new_session(ignore_cch), FakeTokenizer()
    messages = grow(session, tokenizer, turns)
    request = copy.deepcopy(messages) + [{"role": "user", "content": "next"}]
    _CHANGES[change](request[position % len(request)])
    incremental = session.request_keys(request)
    assert incremental == full_keys(request, ignore_cch)
    # The prepare that follows (trie walk, branch, plan) is the one full keys give: same base, same boundary.
    twin = new_session(ignore_cch)
    grow(twin, tokenizer, turns)
    _, plan = session.prepare(request, request_keys=incremental)
    _, twin_plan = twin.prepare(request, request_keys=full_keys(request, ignore_cch))
    assert plan.kind is twin_plan.kind and plan.boundary_reason is twin_plan.boundary_reason
    assert (plan.base.step_id if plan.base else None) == (twin_plan.base.step_id if twin_plan.base else None)


def test_same_message_is_strict_about_what_a_key_can_see():
    base = {"role": "tool", "content": "r", "tool_calls": [tool_call("c", {"n": 1, "x": 0.0})]}
    assert same_message(base, copy.deepcopy(base))
    for variant in ({"n": 1.0, "x": 0.0}, {"n": True, "x": 0.0}, {"n": 1, "x": -0.0}, {"n": 1, "x": 0}):
        other = copy.deepcopy(base)
        other["tool_calls"][0]["function"]["arguments"] = variant
        assert other == base  # Python's == calls them equal...
        assert message_key(other) != message_key(base)  # ...their keys differ...
        assert not same_message(base, other)  # ...so they are not the same message
    assert not same_message({"role": "user", "content": "a"}, {"role": "user", "content": "a", "name": None})
    assert not same_message({"role": "user", "content": ["a"]}, {"role": "user", "content": ("a",)})
