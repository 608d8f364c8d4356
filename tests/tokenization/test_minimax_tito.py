"""MiniMax TITO specifics with the real MiniMax-M2 and MiniMax-M3 tokenizers and official templates."""

from __future__ import annotations

import pytest

from proxy.families import detect_family, get_family, load_tito_tokenizer
from proxy.tokenization import TitoFailure, TitoFailureReason, TitoFragment, build_last_step
from serving.tokenizer_files import model_tokenizer_path

FOLDERS = {"minimax_m2": "minimax", "minimax_m3": "minimax-m3"}
QUERY = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}]
CALL = {
    "role": "assistant",
    "content": "Let me check.",
    "reasoning_content": "Need the tool.",
    "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": {"city": "Paris", "days": 2}}}
    ],
}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21°C"}
TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]


@pytest.fixture(scope="module", params=sorted(FOLDERS))
def family(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def path(family, tokenizer_root):
    return model_tokenizer_path(FOLDERS[family], tokenizer_root)


@pytest.fixture(scope="module")
def tito(family, path):
    return load_tito_tokenizer(family, path)


def test_each_official_template_is_detected_as_its_own_family(family, path):
    detection = detect_family(path)
    assert (detection.family.name, detection.how) == (family, "template_sha256")
    assert get_family(family.replace("_", "-")).name == family


def test_full_encode_equals_the_official_template_through_transformers(tito, path, family):
    """The ids are the official template's text (rendered by transformers' apply_chat_template) tokenized by the
    model's tokenizer.json. M3's config names PreTrainedTokenizerFast, so AutoTokenizer's own ids agree; M2's names
    GPT2Tokenizer, which transformers 5 builds with GPT-2's pre-tokenizer regex instead of MiniMax's (it splits
    ``MiniMax-M2`` as ``Max``/``-``/``M`` where the model's tokenizer has ``Max``/``-M``): the proxy keeps the
    model's tokenizer.json (docs/families.md, "MiniMax")."""
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    auto = transformers.AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    model_tokenizer = tokenizers.Tokenizer.from_file(str(path / "tokenizer.json"))
    messages = QUERY + [CALL, RESULT]
    for kwargs in ({}, {"thinking_mode": "enabled"}, {"thinking_mode": "disabled"}):
        text = auto.apply_chat_template(messages, tools=TOOLS, add_generation_prompt=True, tokenize=False, **kwargs)
        ours = tito.encode_full(messages, TOOLS, kwargs)
        assert ours == model_tokenizer.encode(text, add_special_tokens=False).ids
        official = auto.apply_chat_template(messages, tools=TOOLS, add_generation_prompt=True, tokenize=True, **kwargs)
        official = list(official["input_ids"] if hasattr(official, "keys") else official)
        assert (ours == official) == (family == "minimax_m3")


def test_a_tool_step_extends_the_checkpoint_after_the_end_of_turn(tito, family):
    """The model ends its turn with [e~[; the fragment is the newline, the tool turn and the generation prompt,
    and the checkpoint plus fragment equals the full render (reasoning kept: the turn is after the query)."""
    context = tito.encode_full(QUERY, TOOLS)
    generated = tito.encode_text(tito.render_assistant(CALL))
    assert tito.decode(generated[-1:]) == "[e~["
    result = tito.encode_incremental(context + generated, [RESULT], prior_messages=QUERY + [CALL], tools=TOOLS)
    assert isinstance(result, TitoFragment), result
    prompt = "]~b]ai\n<think>\n" if family == "minimax_m2" else "]~b]ai\n"
    assert result.text == "\n]~b]tool\n<response>sunny, 21°C</response>[e~[\n" + prompt
    assert context + generated + list(result.ids) == tito.encode_full(QUERY + [CALL, RESULT], TOOLS)


def test_tool_results_after_a_turn_without_tool_calls_are_the_templates_error(tito):
    answer = {"role": "assistant", "content": "It is sunny.", "reasoning_content": "easy"}
    context = tito.encode_full(QUERY) + tito.encode_text(tito.render_assistant(answer))
    result = tito.encode_incremental(context, [RESULT], prior_messages=QUERY + [answer])
    assert isinstance(result, TitoFailure) and result.reason is TitoFailureReason.TEMPLATE_ERROR
    ended = tito.encode_incremental(context[:-1], [RESULT], prior_messages=QUERY + [answer])
    assert isinstance(ended, TitoFailure) and ended.reason is TitoFailureReason.NOT_AT_TURN_BOUNDARY


def test_thinking_switches(tito, family):
    if family == "minimax_m2":  # no switch: always thinking
        for kwargs in ({}, {"enable_thinking": False}, {"thinking_mode": "disabled"}):
            assert tito.generation_prompt(kwargs) == "]~b]ai\n<think>\n"
        return
    assert tito.generation_prompt({}) == tito.generation_prompt({"thinking_mode": "adaptive"}) == "]~b]ai\n"
    assert tito.generation_prompt({"thinking_mode": "enabled"}) == "]~b]ai\n<mm:think>"
    assert tito.generation_prompt({"thinking_mode": "disabled"}) == "]~b]ai\n</mm:think>"
    assert tito.render_full(QUERY, None, {"thinking_mode": "disabled"}).endswith("]~b]ai\n</mm:think>")


def test_m2_drops_reasoning_before_the_last_user_message_and_m3_keeps_it(tito, family):
    answer = {"role": "assistant", "content": "Sunny.", "reasoning_content": "looked it up"}
    text = tito.render_full(QUERY + [answer, {"role": "user", "content": "Thanks"}])
    assert ("looked it up" in text) == (family == "minimax_m3")


def test_last_step_masks_each_turn_through_its_end_of_turn(tito, family):
    final = QUERY + [CALL, RESULT, {"role": "assistant", "content": "Sunny, 21°C.", "reasoning_content": "ok"}]
    sample = build_last_step(tito, final, TOOLS)
    assert tito.decode(sample.ids).endswith("Sunny, 21°C.[e~[")
    spans = [tito.decode(sample.ids[b:e]) for b, e in sample.assistant_spans]
    assert len(spans) == 2 and all(span.endswith("[e~[") for span in spans)
    assert spans[1].startswith("ok\n</think>" if family == "minimax_m2" else "<mm:think>ok</mm:think>")
