"""A whole session against a small independent model: hypothesis picks the requests, the outcomes, the order.

The system under test is the session core (``Session``, driven in the registry's order: prepare, tokenize,
restart on a TITO failure, set the context; build the span, commit; drop; finalize and export) with the fake
tokenizer. The model knows nothing of tries or chain machines. It keeps a flat list of committed steps, each with
its conversation (request plus answer) and its token state, and predicts from the spec alone:

- the base of a request: the committed step whose conversation is the longest prefix of the request (same tools;
  reasoning ignored; the newest one among identical conversations); no base, or a base that ended at the length
  limit, means a full encode, else TITO after the base (and a full encode when the fragment fails);
- the boundary reason of every full encode (session start, context change, new conversation, resample, rewrite,
  length exhausted, TITO failure);
- the chain of every commit: its base's chain when the base still sits at that chain's last position, else a new
  chain; and for the same answer as an earlier step over the same checkpoint position (an idempotent retry), that
  step's position: it replaces it at the chain's tip when it ends the same way, it is shadowed (exported nowhere)
  below the tip when it ends at a turn boundary, and it is a step of its own otherwise.

Requests extend any branch (echoing reasoning or dropping it), fork anywhere, retry exactly (the same answer
refreshes the node), change tools, provoke TITO failures; generations overlap (concurrent siblings), fail, hit the
length limit; finalize happens once, after which every commit and prepare is refused. Invariants, from the issue:
every chain position appears in exactly one exported segment as a generated span (a step a retry replaced or
shadowed in none, the answer once); each segment's ids equal the TITO concatenation along its path; pending nodes
are never exported; no commit after finalize. A failed generation leaves nothing behind: the prompts the model
counts as seen (for ``resample`` and ``history_rewritten``) are those of committed steps and of generations still
in flight, never those of failed ones; with nothing in flight the trie has no pending node, and it holds one attach
node per generation in flight.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)

from proxy.tokenization import TitoFailure
from proxy.trajectory.encode_plan import tokenize_plan
from proxy.trajectory.export import export_segments
from proxy.trajectory.message_keys import message_key, reasoning_variant
from proxy.trajectory.session import Session
from proxy.trajectory.session_config import SessionConfig
from proxy.trajectory.session_errors import SessionFinalizedError
from proxy.trajectory.session_results import ExportJob

from .fakes import FakeTokenizer, model_output

# The model names a tools list by a hashable label; the session gets the list itself.
TOOLS = {None: None, "calc": [{"type": "function", "function": {"name": "calc"}}]}
SYSTEMS = ({"role": "system", "content": "main"}, {"role": "system", "content": "helper"})


def canon(message: dict) -> tuple:
    """The model's notion of "the same message": role, content, tool call id (reasoning ignored)."""
    return message["role"], message.get("content") or "", message.get("tool_call_id")


def canon_all(messages) -> tuple:
    return tuple(canon(m) for m in messages)


class ModelStep:
    """A committed step as the model sees it."""

    def __init__(self, step_id, request, answer, tools, context, generated, close, chain, position, base):
        self.step_id, self.request, self.answer, self.tools = step_id, request, answer, tools
        self.conversation = canon_all(request + (answer,))
        # close: None when TITO can extend the step, else the boundary reason of whatever continues it.
        self.context, self.generated, self.close, self.chain = context, generated, close, chain
        # Its position in its chain, and the step its tokens extend (None: a full encode).
        self.position, self.base = position, base

    @property
    def slot(self) -> tuple[int, int]:
        return self.chain, self.position

    @property
    def extendable(self) -> bool:
        return self.close is None

    @property
    def checkpoint(self) -> tuple:
        return self.context + self.generated


def slot_of(step: ModelStep | None) -> tuple[int, int] | None:
    """Where a checkpoint sits (None: no checkpoint, a full encode)."""
    return None if step is None else step.slot


class Pending:
    """A prepared generation: its handle and what the model expects of it."""

    def __init__(self, handle, request, tools, base, context):
        self.handle, self.request, self.tools, self.base, self.context = handle, request, tools, base, context


class SessionVersusModel(RuleBasedStateMachine):
    pending = Bundle("pending")

    def __init__(self) -> None:
        super().__init__()
        self.tokenizer = FakeTokenizer()
        self.session = Session("s", SessionConfig(max_steps_per_session=None), self.tokenizer.end_of_turn_id)
        self.steps: list[ModelStep] = []
        # The generations in flight (their prompts are pending structure in the trie).
        self.live: list[Pending] = []
        # chain -> its number of positions, and the step at its tip.
        self.chain_length: dict[int, int] = {}
        self.chain_tip: dict[int, ModelStep] = {}
        self.real_chain: dict[int, int] = {}
        self.next_chain = 0
        self.answers = 0
        self.in_flight = 0
        self.exported: list[dict] | None = None
        self.finalize_after = 0

    @initialize(after=st.integers(0, 14))
    def plan_the_finalize(self, after):
        """Finalize becomes possible once this many steps were committed (so sessions grow before they end)."""
        self.finalize_after = after

    # -- the model's predictions ---------------------------------------------------------------------------------

    def base_of(self, request: tuple, tools) -> ModelStep | None:
        """The committed step with the longest conversation that prefixes the request; newest on ties."""
        wanted = canon_all(request)
        candidates = [s for s in self.steps if s.tools == tools and wanted[: len(s.conversation)] == s.conversation]
        return max(candidates, key=lambda s: (len(s.conversation), s.step_id), default=None)

    def full_reason(self, request: tuple, tools) -> str:
        if not self.steps:
            return "session_start"
        if any(self.base_of(request, other) is not None for other in {s.tools for s in self.steps} - {tools}):
            return "context_changed"
        seen = self.seen(tools)
        wanted = canon_all(request)
        if wanted[:1] not in seen:
            return "new_conversation"
        if wanted in seen:
            return "resample"
        return "history_rewritten"

    def expect(self, request: tuple, tools) -> tuple[ModelStep | None, str | None, tuple]:
        """(base step the tokens extend, boundary reason or None, expected context ids)."""
        base = self.base_of(request, tools)
        kwargs = {}
        if base is not None and base.extendable:
            new = request[len(base.conversation):]
            fragment = self.tokenizer.encode_incremental(base.checkpoint, list(new))
            if not isinstance(fragment, TitoFailure):
                return base, None, base.checkpoint + fragment.ids
            reason = "tito_failed"
        elif base is not None:
            reason = base.close
        else:
            reason = self.full_reason(request, tools)
        return None, reason, tuple(self.tokenizer.encode_full(list(request), TOOLS[tools], kwargs))

    def seen(self, tools) -> set:
        """Every message-list prefix in the trie under ``tools``: those of committed conversations and of the requests
        still in flight (a failed request took its pending structure with it)."""
        paths = [s.conversation for s in self.steps if s.tools == tools]
        paths += [canon_all(g.request) for g in self.live if g.tools == tools]
        return {path[:k] for path in paths for k in range(1, len(path) + 1)}

    # -- requests ----------------------------------------------------------------------------------------------------

    def fresh_request(self, data) -> tuple:
        system = data.draw(st.sampled_from(SYSTEMS), label="system")
        text = data.draw(st.sampled_from(["q1", "q2", "q3"]), label="question")
        return (system, {"role": "user", "content": text})

    def follow_up(self, data) -> tuple:
        kind = data.draw(st.sampled_from(["user", "user", "tool", "tito-fail", "none"]), label="follow-up")
        if kind == "none":
            return ()
        if kind == "tool":
            return ({"role": "tool", "tool_call_id": "c1", "content": f"r{len(self.steps)}"},)
        return ({"role": "user", "content": "TITO-FAIL" if kind == "tito-fail" else f"u{len(self.steps)}"},)

    def echo(self, step: ModelStep, drop_reasoning: bool) -> tuple:
        answer = dict(step.answer)
        if drop_reasoning:
            answer.pop("reasoning_content", None)
        return step.request + (answer,)

    def draw_request(self, data) -> tuple[tuple, tuple | None]:
        shapes = ["fresh"] + (["extend", "extend", "fork", "retry"] if self.steps else [])
        shape = data.draw(st.sampled_from(shapes), label="shape")
        tools = data.draw(st.sampled_from([None, None, None, "calc"]), label="tools")
        if shape == "fresh":
            return self.fresh_request(data), tools
        step = data.draw(st.sampled_from(self.steps), label="step")
        if data.draw(st.integers(0, 4), label="keep tools"):
            tools = step.tools
        if shape == "retry":
            return step.request, tools
        conversation = self.echo(step, data.draw(st.booleans(), label="drop reasoning"))
        if shape == "fork":
            cut = data.draw(st.integers(1, len(conversation)), label="cut")
            return conversation[:cut] + ({"role": "user", "content": f"fork{len(self.steps)}"},), tools
        return conversation + self.follow_up(data), tools

    # -- rules ---------------------------------------------------------------------------------------------------

    @rule(target=pending, data=st.data())
    def prepare(self, data):
        if self.exported is not None:
            # No resurrection: a finalized session refuses every new generation.
            with pytest.raises(SessionFinalizedError):
                self.session.prepare(list(self.fresh_request(data)))
            return multiple()
        request, tools = self.draw_request(data)
        base, reason, expected = self.expect(request, tools)
        handle, plan = self.session.prepare(list(request), tools=TOOLS[tools])
        ids = tokenize_plan(self.tokenizer, plan)
        if isinstance(ids, TitoFailure):
            plan = self.session.restart_segment(handle, f"{ids.reason.value}: {ids.detail}", list(request))
            ids = tokenize_plan(self.tokenizer, plan)
        tokens = self.session.set_context(handle, ids)
        assert tuple(tokens.input_ids()) == expected
        assert (plan.boundary_reason.value if plan.boundary_reason else None) == reason
        assert (plan.base is None) == (base is None)
        event(f"prepare: {reason or ('fork or extend' if base is not None else '?')}")
        self.in_flight += 1
        generation = Pending(handle, request, tools, base, expected)
        self.live.append(generation)
        return generation

    @rule(generation=consumes(pending), data=st.data())
    def commit(self, generation, data):
        if self.exported is not None:
            self.late_commit_is_rejected_and_changes_nothing(generation)
            return
        outcome = data.draw(st.sampled_from(["new", "new", "reasoned", "same", "length", "no-eot"]), label="outcome")
        siblings = [s for s in self.steps if s.request == generation.request and s.tools == generation.tools]
        if outcome == "same" and siblings:
            answer = siblings[-1].answer
        else:
            self.answers += 1
            answer = {"role": "assistant", "content": f"a{self.answers}"}
            if outcome == "reasoned":
                answer["reasoning_content"] = f"because {self.answers}"
        ids = model_output(answer)
        if outcome == "length":
            ids, finish = ids[:2], "length"
        elif outcome == "no-eot":
            ids, finish = ids[:-1], "stop"
        else:
            finish = "stop"
        span = Session.build_span(generation.handle, ids, [-1.0] * len(ids), ["v"] * len(ids), ())
        result = self.session.commit(generation.handle, span, finish_reason=finish, assistant_message=answer,
                                     key=message_key(answer), variant=reasoning_variant(answer), logprobs_invalid=False)
        self.in_flight -= 1
        self.live.remove(generation)
        close = {"length": "length_exhausted", "no-eot": "no_end_of_turn"}.get(outcome)
        same = [s for s in self.steps if s.conversation == canon_all(generation.request + (answer,))
                and s.tools == generation.tools and reasoning_variant(s.answer) == reasoning_variant(answer)]
        refreshed = bool(same)
        base = generation.base
        # The model's refresh rule: the same answer as the newest identical step, over the same checkpoint position.
        old = same[-1] if same else None
        kind = None
        if old is not None and slot_of(old.base) == slot_of(base):
            if old.position == self.chain_length[old.chain]:
                kind = "replaced" if old.close == close else None
            elif close is None:
                kind = "shadowed"
        forked = False
        if kind is not None:
            chain, position = old.slot
        elif base is not None and self.chain_length[base.chain] == base.position:
            # The model's chain rule: in place when the base still sits at its chain's last position.
            chain, position = base.chain, base.position + 1
        else:
            self.next_chain += 1
            chain, position, forked = self.next_chain, 1, base is not None
        step = ModelStep(len(self.steps) + 1, generation.request, answer, generation.tools, generation.context,
                         tuple(ids), close, chain, position, base)
        self.steps.append(step)
        if kind != "shadowed":
            self.chain_length[chain] = position
            self.chain_tip[chain] = step
        assert result.step_id == step.step_id and result.refreshed == refreshed and result.extendable == step.extendable
        assert result.forked == forked
        # The session numbers chains its own way (pending ones included): the model's chains map one to one.
        assert self.real_chain.setdefault(chain, result.chain_id) == result.chain_id
        assert len(set(self.real_chain.values())) == len(self.real_chain)
        assert result.replaced_step == (old.step_id if kind == "replaced" else None)
        assert result.shadowed == (kind == "shadowed")
        event(f"commit: {kind or ('refreshed apart' if refreshed else 'forked' if forked else 'in place or new')}")

    @rule(generation=consumes(pending))
    def fail(self, generation):
        assert self.session.drop(generation.handle)
        self.in_flight -= 1
        self.live.remove(generation)

    @precondition(lambda self: self.exported is None and len(self.steps) >= self.finalize_after)
    @rule()
    def finalize(self):
        job = self.session.begin_finalize(reward_info={"r": 1})
        assert isinstance(job, ExportJob) and job.steps == len(self.steps)
        segments = export_segments(job.export, self.session.config.export)
        self.exported = segments
        self.check_export(segments)
        event(f"finalize: {min(len(self.steps) // 5 * 5, 20)}+ steps, {'some' if self.in_flight else 'no'} in flight")

    def late_commit_is_rejected_and_changes_nothing(self, generation):
        answer = {"role": "assistant", "content": "late"}
        span = Session.build_span(generation.handle, model_output(answer), None, [None] * 3, ())
        with pytest.raises(SessionFinalizedError):
            self.session.commit(generation.handle, span, finish_reason="stop", assistant_message=answer,
                                key=message_key(answer), variant=None, logprobs_invalid=True)
        self.in_flight -= 1
        self.live.remove(generation)
        assert self.session.machine.statistics().steps == len(self.steps)
        event("late commit rejected")

    # -- invariants and the export check ---------------------------------------------------------------------------

    def check_export(self, segments: list[dict]) -> None:
        by_id = {s.step_id: s for s in self.steps}
        # One segment per chain, ending at its tip, in commit order; pending structure never exported.
        assert [seg["tip_step"] for seg in segments] == sorted(tip.step_id for tip in self.chain_tip.values())
        trained: dict[int, int] = {}
        expected: dict[int, int] = {}
        for segment in segments:
            tip = by_id[segment["tip_step"]]
            # The segment is the TITO concatenation along its path.
            assert segment["token_ids"] == list(tip.checkpoint)
            assert [canon(m) for m in segment["messages"]] == list(tip.conversation)
            for record in segment["steps"]:
                if record["trained"]:
                    step = by_id[record["step_id"]]
                    context = record["concat_context_token_count"]
                    assert record["concat_token_ids"][context:] == list(step.generated)
                    assert record["concat_response_mask"][context:] == [1] * len(step.generated)
                    assert step.chain == tip.chain
                    trained[step.step_id] = trained.get(step.step_id, 0) + 1
            # The model's walk: back from the tip through the bases, one step per position of the chain.
            walk, step = [], tip
            while step is not None and step.chain == tip.chain:
                walk.append(step)
                step = step.base
            assert [s.position for s in walk] == list(range(self.chain_length[tip.chain], 0, -1))
            expected.update((s.step_id, 1) for s in walk)
        # Every chain position is a generated span of exactly one segment; a step an idempotent retry replaced or
        # shadowed is in none (the answer is trained once, in the step its segment holds).
        assert trained == expected

    def teardown(self):
        event(f"committed steps: {min(len(self.steps) // 5 * 5, 20)}+")

    @invariant()
    def session_counts_match_the_model(self):
        view = self.session.debug_view()
        assert (view.steps, view.in_flight) == (len(self.steps), self.in_flight)
        if view.trie is not None:
            distinct = {(s.tools, s.conversation, reasoning_variant(s.answer)) for s in self.steps}
            assert view.trie.checkpoints == len(distinct)
        if self.exported is None:
            # Failed generations leave no residue: pending nodes are exactly the paths of the generations in flight.
            trie = self.session.trie
            assert trie.holds == self.in_flight
            if not self.in_flight:
                assert view.trie.pending == 0
            contexts = {s.tools for s in self.steps} | {g.tools for g in self.live}
            assert view.trie.contexts == len(contexts)


TestSessionVersusModel = SessionVersusModel.TestCase
TestSessionVersusModel.settings = settings(
    max_examples=200, stateful_step_count=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much]
)
