"""What every interleaving must keep, checked on a finished :class:`~tests.interleavings.scenario.Scenario`.

Sources of truth, never the proxy's own report where an independent one exists: the engine's ``request_log`` (one
``RequestRecord`` per request: its ``input_ids``, ``output_ids`` and the weight version in effect when it generated
each token, ``token_versions``), the recorder's pieces (what the proxy sent upstream and each token its reader took,
with the gate's state at that instant), what each client received, and the exported segments.
"""

from __future__ import annotations

import collections
from typing import Any

from engine import expected_row
from proxy.trajectory.routed_experts import assemble_routed_experts
from tests.interleavings.scenario import Client, Scenario

#: the error codes a client may get in these scenarios: a commit or prepare after finalize, a session spanning a
#: pause without partial rollout, a stream that showed tokens of a discarded try (no partial rollout)
EXPECTED_ERRORS = {"session_finalized", "trajectory_version_changed", "generation_restarted"}


def check_scenario(s: Scenario) -> None:
    """Every property, in the order of the issue's list, then the bookkeeping."""
    records = {record.rid: record for record in s.engine.request_log}
    check_no_token_received_while_paused(s)
    check_token_versions(s, records)
    check_continuations(s, records)
    check_budgets(s, records)
    check_routed_expert_rows(s)
    check_every_committed_step_exported_once(s)
    check_nothing_left_behind(s)


def check_no_token_received_while_paused(s: Scenario) -> None:
    """No token reaches the proxy between a pause acknowledgement (gate PAUSED) and the next resume."""
    late = [(piece.client, piece.rid, index) for piece in s.upstream.pieces
            for index, token in enumerate(piece.tokens) if token.gate_state == "PAUSED"]
    assert not late, f"tokens received while the gate was PAUSED: {late}"


def check_token_versions(s: Scenario, records: dict[str, Any]) -> None:
    """Every token received is the engine's, with the version the engine generated it under; every token a
    generation recorded carries that version."""
    for piece in s.upstream.pieces:
        if not piece.tokens:
            continue
        record = records[piece.rid]
        count = len(piece.tokens)
        assert piece.ids == list(record.output_ids[:count]), (piece.client, piece.rid)
        assert [t.reported_version for t in piece.tokens] == list(record.token_versions[:count]), piece.rid
    for client in s.clients:
        generation = client.generation
        if generation is None:
            continue
        ids, versions = _expected_tokens(s, client, records)
        kept = len(generation.output.ids)
        assert generation.output.ids == ids[:kept], client.name
        assert generation.output.versions == versions[:kept], (client.name, generation.output.versions, versions)


def _expected_tokens(s: Scenario, client: Client, records: dict[str, Any]) -> tuple[list[int], list[str]]:
    """The tokens a generation may hold, per the engine: with partial rollout every piece's received tokens in
    order; without, the last piece's (each request starts from scratch)."""
    pieces = s.upstream.of(client.name)
    if not s.partial_rollout:
        pieces = pieces[-1:]
    ids: list[int] = []
    versions: list[str] = []
    for piece in pieces:
        count = len(piece.tokens)
        if count:
            record = records[piece.rid]
            ids += record.output_ids[:count]
            versions += record.token_versions[:count]
    return ids, versions


def check_continuations(s: Scenario, records: dict[str, Any]) -> None:
    """A committed step's ids are the concatenation of its pieces (each continuation's input is the prompt plus the
    tokens kept so far) and the engine's own record of its last request; the client received exactly them."""
    for client in _committed(s):
        generation = client.generation
        prompt = list(generation.output.prompt_ids)
        pieces = s.upstream.of(client.name)
        assert pieces, client.name
        kept: list[int] = []
        for piece in pieces:
            if s.partial_rollout:
                assert list(piece.input_ids) == prompt + kept, (client.name, piece.rid)
                kept += piece.ids
            else:
                assert list(piece.input_ids) == prompt, (client.name, piece.rid)
                kept = piece.ids
        last = pieces[-1]
        record = records[last.rid]
        if last.finished is None or last.finished.finish_reason.kind not in ("stop", "length"):
            # Cut by a pause with the budget used up: it finished as length at resume, with no other request.
            assert s.partial_rollout and len(kept) == generation.budget.max_new_tokens, (client.name, last.rid)
        assert list(record.input_ids) == list(last.input_ids) and list(record.output_ids) == last.ids, last.rid
        assert generation.output.ids == kept, client.name
        assert generation.output.ids == list(record.input_ids[len(prompt):]) + list(record.output_ids), client.name
        if client.answer is not None:
            assert client.answer["token_ids"] == generation.output.ids, client.name
            assert client.answer["weight_versions"] == generation.output.versions, client.name
        elif client.content is not None:
            streamed = [i for p in client.payloads if isinstance(p, dict) for i in p.get("token_ids") or ()]
            assert streamed == generation.output.ids, client.name


def check_budgets(s: Scenario, records: dict[str, Any]) -> None:
    """Budgets never go negative: every request asks for exactly the budget left (>= 1) after the tokens it
    appends, the engine never exceeds it, and no generation holds more than its budget."""
    for client in s.clients:
        generation = client.generation
        if generation is None or generation.budget is None:
            continue
        budget = generation.budget.max_new_tokens
        assert budget == client.op.max_tokens
        stats = generation.statistics()
        assert 0 <= stats.tokens <= stats.budget == budget, (client.name, stats)
        assert len(generation.output.ids) <= budget
        for piece in s.upstream.of(client.name):
            appended = len(piece.input_ids) - len(generation.output.prompt_ids)
            assert 0 <= appended < budget, (client.name, piece.rid, appended)
            assert piece.max_new_tokens == budget - appended >= 1, (client.name, piece.rid, piece.max_new_tokens)
            record = records.get(piece.rid)
            if record is not None:
                assert len(record.output_ids) <= piece.max_new_tokens, piece.rid


def check_routed_expert_rows(s: Scenario) -> None:
    """Every exported segment carries exactly one routed-expert row per input position (``len(token_ids) - 1``), none
    missing, each the engine's row for that position's token under one of the versions the engine had."""
    config = s.engine.config
    versions = {version for _, version in s.engine.version_history}
    for sid, segments in s.segments.items():
        for segment in segments:
            rows = assemble_routed_experts(segment)
            tokens = segment["token_ids"]
            assert rows is not None, (sid, segment["trajectory_id"])
            assert (rows.num_rows, rows.missing) == (len(tokens) - 1, ()), (sid, rows.num_rows, rows.missing)
            for position in range(rows.num_rows):
                candidates = {
                    _row_bytes(expected_row(config.seed, position, tokens[position], version, config.num_layers,
                                            config.num_experts, config.experts_per_token))
                    for version in versions
                }
                assert rows.row(position) in candidates, (sid, segment["trajectory_id"], position)


def _row_bytes(row: list[list[int]]) -> bytes:
    return b"".join(expert.to_bytes(4, "little") for layer in row for expert in layer)


def check_every_committed_step_exported_once(s: Scenario) -> None:
    """Every committed step is a trained span of exactly one exported segment, with the ids it generated; nothing
    else is trained. An idempotent retry (spec 5.2: the same answer to the same request in the session) is exported
    once: of such twins one is trained and the others, superseded, are in no segment (``docs/sessions.md``)."""
    trained: collections.Counter[str] = collections.Counter()
    spans: dict[str, list[int]] = {}
    for segments in s.segments.values():
        for segment in segments:
            for record in segment["steps"]:
                if record["trained"]:
                    trained[record["generation_id"]] += 1
                    spans[record["generation_id"]] = record["concat_token_ids"][record["concat_context_token_count"]:]
    committed = {client.generation.prepared.generation_id: client for client in _committed(s)}
    assert set(trained) <= set(committed) and set(trained.values()) <= {1}, (dict(trained), sorted(committed))
    for generation_id, client in committed.items():
        if generation_id in trained:
            assert spans[generation_id] == client.generation.output.ids, generation_id
            continue
        twins = [other for other_id, other in committed.items() if other_id in trained and other.session
                 == client.session and other.messages == client.messages
                 and other.generation.output.message.to_openai() == client.generation.output.message.to_openai()]
        assert twins, (generation_id, "committed, in no segment, and no retry of it is")


def check_nothing_left_behind(s: Scenario) -> None:
    """Every generation ended; the gate, the sessions and the controller hold nothing; no client got an error other
    than the expected ones (never a 500); a client that stayed got an answer."""
    gate = s.gate.statistics()
    assert (gate.state, gate.in_flight, gate.waiting) == ("RUNNING", 0, 0), gate
    assert s.services.sessions.statistics().in_flight == 0
    assert s.controller.statistics().active == 0
    for client in s.clients:
        if client.error is not None:
            assert client.error.code in EXPECTED_ERRORS, (client.name, client.error.code, client.error.message)
        errors = [p["error"]["code"] for p in client.payloads if isinstance(p, dict) and "error" in p]
        assert set(errors) <= EXPECTED_ERRORS, (client.name, errors)
        generation = client.generation
        if generation is not None:
            state = generation.statistics().state
            assert state in ("RESPONDED", "REJECTED", "FAILED", "CANCELLED"), (client.name, state)
        if not client.disconnected:
            assert client.error is not None or client.answer is not None or client.payloads[-1:] == ["[DONE]"], (
                client.name)


def _committed(s: Scenario) -> list[Client]:
    """The clients whose generation committed its step (it may have left before reading the answer)."""
    return [c for c in s.clients if c.generation is not None and c.generation.statistics().state == "RESPONDED"]


def coverage(s: Scenario) -> list[str]:
    """What happened in a scenario, for ``hypothesis.event`` (``--hypothesis-show-statistics`` tallies them): the
    suite is only as good as the interleavings it actually reaches."""
    seen = set()
    for kind, *rest in s.trainer:
        if kind == "pause" and rest[0].aborted:
            seen.add("a pause interrupted a generation")
        if kind == "resume refused":
            seen.add("a resume was refused while a pause was in progress")
    for client in s.clients:
        pieces = s.upstream.of(client.name)
        if client.generation is not None:
            state = client.generation.statistics().state
        elif client.disconnected and client.error is None:
            state = "before its step was prepared (client gone)"
        else:
            state = "at prepare (refused)"
        seen.add(f"a generation ended {state}")
        if len(pieces) > 1 and state == "RESPONDED":
            seen.add(f"a step committed after a {'continuation' if s.partial_rollout else 'restart'}")
        if any(p.tokens and p.finished is None for p in pieces):
            seen.add("a stream was cut")
        if any(p.finished is not None and p.finished.finish_reason.kind == "abort" for p in pieces):
            seen.add("a request was read to its abort finish")
        if client.disconnected and state == "CANCELLED" and any(p.tokens for p in pieces):
            seen.add("a client left mid-generation")
        if client.error is not None:
            seen.add(f"error {client.error.code}")
        for payload in client.payloads:
            if isinstance(payload, dict) and "error" in payload:
                seen.add(f"stream error {payload['error']['code']}")
    if any(len(segment["steps"]) > 1 for segments in s.segments.values() for segment in segments):
        seen.add("a multi-step segment")
    if len({version for _, version in s.engine.version_history}) > 1:
        seen.add("the weights changed")
    return sorted(seen)


__all__ = ["EXPECTED_ERRORS", "check_scenario", "coverage"]
