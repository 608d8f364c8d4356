"""GLM TITO specifics with the real GLM-4.7 tokenizer and the official GLM-4.7/5/5.1/5.2 templates."""

from __future__ import annotations

import pytest

from proxy.families import detect_family, load_tito_tokenizer
from proxy.tokenization import TitoFailure, TitoFailureReason, TitoFragment, build_last_step

from .glm_files import GLM_FAMILIES, glm_path

QUERY = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}]
CALL = {
    "role": "assistant",
    "content": "Let me check.",
    "reasoning_content": "Need the tool.",
    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "weather", "arguments": {"city": "Paris", "days": 2}}}],
}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21°C"}
TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]


@pytest.fixture(scope="module", params=GLM_FAMILIES)
def family(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def glm(family):
    return load_tito_tokenizer(family, glm_path(family))


def test_each_official_template_is_detected_as_its_own_version(family):
    detection = detect_family(glm_path(family))
    assert (detection.family.name, detection.how) == (family, "template_sha256")


def test_full_encode_equals_the_official_template_through_transformers(glm, family):
    """The ids equal AutoTokenizer.apply_chat_template's (the official template rendered by transformers)."""
    transformers = pytest.importorskip("transformers")
    auto = transformers.AutoTokenizer.from_pretrained(str(glm_path(family)), local_files_only=True)
    for kwargs in ({}, {"enable_thinking": False}):
        messages = QUERY + [CALL, RESULT]
        official = auto.apply_chat_template(messages, tools=TOOLS, add_generation_prompt=True, tokenize=True, **kwargs)
        official = official["input_ids"] if isinstance(official, dict) or hasattr(official, "keys") else official
        assert glm.encode_full(messages, TOOLS, kwargs) == list(official)


def test_a_tool_step_extends_the_checkpoint_after_the_observation_token(glm):
    """The model stops on <|observation|>; the fragment is the tool response and the generation prompt, and the
    checkpoint plus fragment equals the full render."""
    context = glm.encode_full(QUERY, TOOLS)
    generated = glm.encode_text(glm.render_assistant(CALL))
    assert glm.decode(generated[-1:]) == "<|observation|>"
    result = glm.encode_incremental(context + generated, [RESULT], prior_messages=QUERY + [CALL], tools=TOOLS)
    assert isinstance(result, TitoFragment), result
    assert result.text == "<tool_response>sunny, 21°C</tool_response><|assistant|><think>"
    assert context + generated + list(result.ids) == glm.encode_full(QUERY + [CALL, RESULT], TOOLS)


def test_a_checkpoint_that_stopped_on_another_role_is_not_extended(glm):
    """Stopped on <|user|> (no tool calls) but the client sends tool results: the template continues with
    <|observation|>, so the checkpoint cannot be extended token-exactly."""
    answer = {"role": "assistant", "content": "It is sunny."}
    context = glm.encode_full(QUERY) + glm.encode_text(glm.render_assistant(answer))
    result = glm.encode_incremental(context, [RESULT], prior_messages=QUERY + [answer])
    assert isinstance(result, TitoFailure) and result.reason is TitoFailureReason.JUNCTION_MISMATCH
    assert "<|observation|>" in result.detail and "<|user|>" in result.detail
    ended = glm.encode_incremental(context[:-1], [RESULT], prior_messages=QUERY + [answer])
    assert isinstance(ended, TitoFailure) and ended.reason is TitoFailureReason.NOT_AT_TURN_BOUNDARY


def test_thinking_switches(glm, family):
    off = "<think></think>" if family == "glm5_2" else "</think>"
    assert glm.generation_prompt({}) == glm.generation_prompt({"enable_thinking": True}) == "<|assistant|><think>"
    assert glm.generation_prompt({"enable_thinking": False}) == "<|assistant|>" + off
    assert glm.render_full(QUERY, None, {"enable_thinking": False}).endswith("<|assistant|>" + off)


def test_last_step_masks_each_turn_through_its_stop_token(glm):
    final = QUERY + [CALL, RESULT, {"role": "assistant", "content": "Sunny, 21°C.", "reasoning_content": "ok"}]
    sample = build_last_step(glm, final, TOOLS)
    assert glm.decode(sample.ids).endswith("Sunny, 21°C.<|user|>")
    spans = [glm.decode(sample.ids[b:e]) for b, e in sample.assistant_spans]
    assert spans[0].endswith("</tool_call><|observation|>") and spans[1].endswith("<|user|>")
    assert spans[1].startswith("ok</think>")
