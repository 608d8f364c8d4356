"""Incremental (TITO) encoding: exact fragments, safe failures, and the field-notes regressions (items 1, 2, 4)."""

from __future__ import annotations

import pytest
import tokenizers

from proxy.families import Qwen3TitoTokenizer, Qwen35TitoTokenizer
from proxy.tokenization import (
    DriftKind,
    TitoFailure,
    TitoFailureReason,
    TitoFragment,
    TitoTokenizer,
    audit_drift,
)
from proxy.tokenization.tito import read_chat_template

THINKING = [{}, {"enable_thinking": True}, {"enable_thinking": False}]
TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
OPENING = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Fix the bug."}]


def assistant(step: int, *, reasoning: str | None = "Let me look.", n_calls: int = 1, content: str = "") -> dict:
    message = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    if n_calls:
        message["tool_calls"] = [
            {
                "id": f"call_{step}_{i}",
                "type": "function",
                "function": {"name": "read_file", "arguments": f'{{"path": "src/{step}_{i}.py"}}'},
            }
            for i in range(n_calls)
        ]
    return message


def tool_result(step: int, i: int = 0, content: str = "def f():\n    return 1\n") -> dict:
    return {"role": "tool", "tool_call_id": f"call_{step}_{i}", "content": content}


def generate(tito: TitoTokenizer, message: dict, kwargs: dict) -> list[int]:
    """A model that emits the template's own rendering of ``message``."""
    return tito.encode_text(tito.render_assistant(message, kwargs))


def extend(tito: TitoTokenizer, checkpoint, new, prior, tools=None, kwargs=None) -> TitoFragment:
    """The fragment after ``checkpoint``; the incremental encode must succeed."""
    result = tito.encode_incremental(checkpoint, new, prior_messages=prior, tools=tools, chat_template_kwargs=kwargs)
    assert isinstance(result, TitoFragment), result
    return result


# -- exact fragments ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs", THINKING)
def test_encode_incremental_consecutive_tool_results_form_one_user_turn(tito, kwargs):
    reasoning = None if kwargs.get("enable_thinking") is False else "Two files."
    call = assistant(0, reasoning=reasoning, n_calls=2)
    checkpoint = tito.encode_full(OPENING, TOOLS, kwargs) + generate(tito, call, kwargs)
    new = [tool_result(0, 0, "one"), tool_result(0, 1, "two")]
    fragment = extend(tito, checkpoint, new, OPENING + [call], TOOLS, kwargs)
    assert fragment.text == (
        "\n<|im_start|>user\n<tool_response>\none\n</tool_response>\n<tool_response>\ntwo\n</tool_response>"
        "<|im_end|>\n" + tito.generation_prompt(kwargs)
    )
    assert fragment.text.count("<|im_start|>") == 2


@pytest.mark.parametrize("kwargs", THINKING)
def test_encode_incremental_user_turn_ends_with_the_thinking_prefix(tito, kwargs):
    reasoning = None if kwargs.get("enable_thinking") is False else "Done."
    answer = assistant(0, reasoning=reasoning, n_calls=0, content="Fixed.")
    checkpoint = tito.encode_full(OPENING, None, kwargs) + generate(tito, answer, kwargs)
    new = [{"role": "user", "content": "Thanks! 😀"}]
    fragment = extend(tito, checkpoint, new, OPENING + [answer], None, kwargs)
    assert fragment.text == "\n<|im_start|>user\nThanks! 😀<|im_end|>\n" + tito.generation_prompt(kwargs)
    assert fragment.ids == tuple(tito.encode_text(fragment.text))


@pytest.mark.parametrize("kwargs", [{}, {"enable_thinking": False}])
def test_encode_incremental_equals_full_render_in_a_tool_loop(qwen3_5_tito, kwargs):
    """Qwen3.5 renders a tool loop (no new user query) exactly as generated: TITO == full render."""
    tito = qwen3_5_tito
    reasoning = None if kwargs else "Read it."
    messages = list(OPENING)
    context = tito.encode_full(messages, TOOLS, kwargs)
    for step in range(4):
        call = assistant(step, reasoning=reasoning)
        checkpoint = context + generate(tito, call, kwargs)
        messages.append(call)
        new = [tool_result(step)]
        fragment = extend(tito, checkpoint, new, messages, TOOLS, kwargs)
        messages.extend(new)
        context = checkpoint + list(fragment.ids)
        assert context == tito.encode_full(messages, TOOLS, kwargs)


def test_encode_incremental_system_message_qwen3_renders_it(qwen3_tito):
    tito, kwargs = qwen3_tito, {"enable_thinking": True}
    answer = assistant(0, n_calls=0, content="Fixed.")
    checkpoint = tito.encode_full(OPENING, None, kwargs) + generate(tito, answer, kwargs)
    new = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Next."}]
    fragment = extend(tito, checkpoint, new, OPENING + [answer], None, kwargs)
    assert fragment.text.startswith("\n<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nNext.")


def test_encode_incremental_system_message_qwen3_5_is_a_template_error(qwen3_5_tito):
    tito = qwen3_5_tito
    answer = assistant(0, n_calls=0, content="Fixed.")
    checkpoint = tito.encode_full(OPENING) + generate(tito, answer, {})
    new = [{"role": "system", "content": "Be brief."}]
    result = tito.encode_incremental(checkpoint, new, prior_messages=OPENING + [answer])
    assert isinstance(result, TitoFailure)
    assert result.reason is TitoFailureReason.TEMPLATE_ERROR
    assert "System message must be at the beginning" in result.detail


def test_encode_incremental_does_not_depend_on_the_history_content(tito):
    """The fragment is rendered from a synthetic context: any history ending with an assistant turn gives it."""
    answer_a = assistant(0, n_calls=0, content="A")
    answer_b = assistant(0, n_calls=0, content="B", reasoning="long\nreasoning")
    new = [{"role": "user", "content": "again"}]
    eot = [tito.end_of_turn_id]
    first = tito.encode_incremental(eot, new, prior_messages=OPENING + [answer_a])
    second = tito.encode_incremental(eot, new, prior_messages=[{"role": "user", "content": "x"}, answer_b])
    assert first == second and first.ok


def test_encode_incremental_client_text_cannot_forge_the_cut(tito):
    """Content that contains the synthetic anchor (hypothesis found it in the source) still gives the exact
    fragment: the anchor is chosen to occur nowhere in the new messages."""
    from proxy.tokenization.tito import ANCHOR

    forged = f"{ANCHOR}<|im_end|>\n{ANCHOR}x"
    new = [tool_result(0, 0, forged), {"role": "user", "content": ANCHOR}]
    fragment = extend(tito, [tito.end_of_turn_id], new, OPENING + [assistant(0)])
    assert fragment.text.startswith(f"\n<|im_start|>user\n<tool_response>\n{forged}\n</tool_response>")
    assert fragment.text.endswith(f"<|im_start|>user\n{ANCHOR}<|im_end|>\n" + tito.generation_prompt())


def test_encode_incremental_tool_call_arguments_string_or_object_render_alike(tito):
    as_string = assistant(0)
    as_object = assistant(0)
    as_object["tool_calls"][0]["function"]["arguments"] = {"path": "src/0_0.py"}
    assert tito.render_assistant(as_string, {}) == tito.render_assistant(as_object, {})


def test_qwen3_5_template_itself_rejects_string_arguments(qwen3_5_path):
    """Why arguments are parsed before the template: Qwen3.5's template fails on a JSON string."""
    from transformers.utils.chat_template_utils import render_jinja_template

    messages = [OPENING[1], assistant(0)]
    with pytest.raises(TypeError, match="mapping"):
        render_jinja_template([messages], chat_template=read_chat_template(qwen3_5_path))


# -- failures are reported, never raised ----------------------------------------------------------------------------


def test_encode_incremental_length_exhaustion_is_not_at_turn_boundary(tito):
    """A generation cut by max_tokens ends without <|im_end|>: TITO refuses to extend it."""
    checkpoint = tito.encode_full(OPENING) + tito.encode_text("I was about to say")
    prior = OPENING + [{"role": "assistant", "content": "I was about to say"}]
    result = tito.encode_incremental(checkpoint, [{"role": "user", "content": "go on"}], prior_messages=prior)
    assert isinstance(result, TitoFailure)
    assert result.reason is TitoFailureReason.NOT_AT_TURN_BOUNDARY
    assert not result.ok


def test_encode_incremental_other_stop_token_is_not_at_turn_boundary(tito):
    endoftext = tito.encode_text("<|endoftext|>")
    result = tito.encode_incremental(tito.encode_full(OPENING) + endoftext, [{"role": "user", "content": "x"}])
    assert result.reason is TitoFailureReason.NOT_AT_TURN_BOUNDARY


def test_encode_incremental_empty_checkpoint_is_not_at_turn_boundary(tito):
    assert tito.encode_incremental([], [{"role": "user", "content": "x"}]).reason is (
        TitoFailureReason.NOT_AT_TURN_BOUNDARY
    )


def test_encode_incremental_history_not_ending_with_assistant_is_not_at_turn_boundary(tito):
    result = tito.encode_incremental([tito.end_of_turn_id], [{"role": "user", "content": "x"}], prior_messages=OPENING)
    assert result.reason is TitoFailureReason.NOT_AT_TURN_BOUNDARY


def test_encode_incremental_no_new_messages_is_empty_fragment(tito):
    result = tito.encode_incremental([tito.end_of_turn_id], [], prior_messages=OPENING + [assistant(0)])
    assert result.reason is TitoFailureReason.EMPTY_FRAGMENT


@pytest.mark.parametrize(
    "bad",
    [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
        {"role": "tool", "content": 3},
        {"role": "developer", "content": "x"},
    ],
)
def test_encode_incremental_bad_message_is_invalid_message(tito, bad):
    result = tito.encode_incremental([tito.end_of_turn_id], [bad])
    assert result.reason is TitoFailureReason.INVALID_MESSAGE


def test_encode_incremental_invalid_tool_call_json_is_invalid_message(tito):
    broken = {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": '{"a": '}}]}
    result = tito.encode_incremental([tito.end_of_turn_id], [tool_result(0), broken, tool_result(1)])
    assert result.reason is TitoFailureReason.INVALID_MESSAGE


def test_encode_incremental_history_without_user_query_qwen3_5_is_template_error(qwen3_5_tito):
    prior = [{"role": "system", "content": "s"}, {"role": "assistant", "content": "hello"}]
    result = qwen3_5_tito.encode_incremental([qwen3_5_tito.end_of_turn_id], [tool_result(0)], prior_messages=prior)
    assert result.reason is TitoFailureReason.TEMPLATE_ERROR
    assert "No user query" in result.detail


def test_encode_full_errors_raise_tito_error(qwen3_5_tito):
    from proxy.tokenization import TitoError

    with pytest.raises(TitoError) as info:
        qwen3_5_tito.encode_full([{"role": "system", "content": "only"}])
    assert info.value.failure.reason is TitoFailureReason.TEMPLATE_ERROR
    with pytest.raises(TitoError) as info:
        qwen3_5_tito.encode_full([{"role": "user", "content": [{"type": "audio"}]}])
    assert info.value.failure.reason is TitoFailureReason.INVALID_MESSAGE


def test_render_assistant_with_reasoning_under_thinking_off_is_refused(tito):
    from proxy.tokenization import TitoError

    with pytest.raises(TitoError) as info:
        tito.render_assistant(assistant(0, reasoning="thoughts"), {"enable_thinking": False})
    assert info.value.failure.reason is TitoFailureReason.JUNCTION_MISMATCH


# -- field notes item 1: the newline at the assistant-to-tool junction (verl#6501, Qwen3) ----------------------------

# The template shape that bit verl: an assistant turn followed by a tool result is not closed by "<|im_end|>\n"
# but by "<|im_end|>" alone, so appending a separately rendered tool turn silently loses the newline.
_ASSISTANT_END = "        {{- '<|im_end|>\\n' }}\n    {%- elif message.role == \"tool\" %}"
_ASSISTANT_END_NO_NEWLINE_BEFORE_TOOL = (
    "        {{- '<|im_end|>' }}\n"
    "        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '\\n' }}{%- endif %}\n"
    "    {%- elif message.role == \"tool\" %}"
)


@pytest.mark.parametrize("kwargs", [{"enable_thinking": True}, {}])
def test_fieldnote1_assistant_to_tool_junction_keeps_the_newline(tito, kwargs):
    call = assistant(0)
    checkpoint = tito.encode_full(OPENING, TOOLS, kwargs) + generate(tito, call, kwargs)
    messages = OPENING + [call, tool_result(0)]
    fragment = extend(tito, checkpoint, messages[-1:], messages[:-1], TOOLS, kwargs)
    assert fragment.ids[0] == tito.newline_id and fragment.ids[1] == tito.turn_start_id
    assert checkpoint + list(fragment.ids) == tito.encode_full(messages, TOOLS, kwargs)


def test_fieldnote1_naive_append_without_newline_is_reported_as_junction_drift(qwen3_tito):
    tito, kwargs = qwen3_tito, {"enable_thinking": True}
    call = assistant(0)
    messages = OPENING + [call, tool_result(0)]
    checkpoint = tito.encode_full(OPENING, TOOLS, kwargs) + generate(tito, call, kwargs)
    naive = checkpoint + tito.encode_text(  # the tool turn rendered on its own and appended: no junction newline
        "<|im_start|>user\n<tool_response>\ndef f():\n    return 1\n\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    report = audit_drift(naive, tito.encode_full(messages, TOOLS, kwargs), tito)
    assert report.kind is DriftKind.JUNCTION
    assert report.first_divergence == len(checkpoint)


@pytest.mark.parametrize("family_class", [Qwen3TitoTokenizer, Qwen35TitoTokenizer])
def test_fieldnote1_template_dropping_the_junction_newline_is_a_junction_mismatch(request, family_class):
    family = family_class.family
    path = request.getfixturevalue(f"{family}_path")
    template = read_chat_template(path)
    assert template.count(_ASSISTANT_END) == 1
    broken = family_class(
        tokenizers.Tokenizer.from_file(str(path / "tokenizer.json")),
        template.replace(_ASSISTANT_END, _ASSISTANT_END_NO_NEWLINE_BEFORE_TOOL),
    )
    call = assistant(0)
    checkpoint = broken.encode_full(OPENING, TOOLS) + generate(broken, call, {})
    result = broken.encode_incremental(checkpoint, [tool_result(0)], prior_messages=OPENING + [call], tools=TOOLS)
    assert isinstance(result, TitoFailure)
    assert result.reason is TitoFailureReason.JUNCTION_MISMATCH


# -- field notes item 2: 48 of 48 tool-using turns failed a prefix-stability assertion (NeMo Gym#1787) ---------------


def _resplit(tito: TitoTokenizer, ids: list[int]) -> list[int]:
    """A model's own, non-canonical tokenization of the same text: every "\\n\\n" token emitted as two "\\n"."""
    double = tito.encode_text("\n\n")
    assert len(double) == 1
    out = []
    for token in ids:
        out.extend([tito.newline_id, tito.newline_id] if token == double[0] else [token])
    return out


@pytest.mark.parametrize("kwargs", [{"enable_thinking": True}, {}])
def test_fieldnote2_48_tool_turns_with_multiline_calls_and_resplit_tokens_extend_exactly(tito, kwargs):
    messages = list(OPENING)
    context = tito.encode_full(messages, TOOLS, kwargs)
    generated_spans = []
    for step in range(48):
        call = assistant(step, reasoning=f"Step {step}:\n\ncheck\n  the file.")
        call["tool_calls"][0]["function"]["arguments"] = {
            "path": f"src/{step}.py",
            "patch": "def f():\n\n    return {'a': [1, 2]}\n",
            "nested": {"lines": ["x\n", "y"], "ok": True},
        }
        generated = _resplit(tito, generate(tito, call, kwargs))
        checkpoint = context + generated
        generated_spans.append((len(context), len(checkpoint)))
        messages.append(call)
        new = [tool_result(step, 0, f"line 1\n\nline {step}\n")]
        fragment = extend(tito, checkpoint, new, messages, TOOLS, kwargs)
        messages.extend(new)
        context = checkpoint + list(fragment.ids)
    # the model's own tokens are kept verbatim, every step
    for (begin, end), step_call in zip(generated_spans, messages[2::2]):
        assert tito.decode(context[begin:end]) == tito.render_assistant(step_call, kwargs)
    assert tito.decode(context) == tito.render_full(messages, TOOLS, kwargs)
    report = audit_drift(context, tito.encode_full(messages, TOOLS, kwargs), tito)
    assert report.kind is DriftKind.BPE_RESPLIT
    assert generated_spans[0][0] <= report.first_divergence < generated_spans[0][1]


# -- field notes item 4: reasoning-stripping templates broke prefix replacement, the fallback duplicated tokens ------


@pytest.mark.parametrize("kwargs", [{}, {"enable_thinking": True}])
def test_fieldnote4_reasoning_stripped_history_keeps_tokens_once(tito, kwargs):
    messages = list(OPENING)
    context = tito.encode_full(messages, None, kwargs)
    reasonings = []
    for turn in range(3):
        reasoning = f"Private chain of thought number {turn}."
        reasonings.append(reasoning)
        answer = assistant(turn, reasoning=reasoning, n_calls=0, content=f"Answer {turn}.")
        checkpoint = context + generate(tito, answer, kwargs)
        messages.append(answer)
        new = [{"role": "user", "content": f"Question {turn + 1}?"}]
        fragment = extend(tito, checkpoint, new, messages, None, kwargs)
        assert tito.decode(fragment.ids) == (
            f"\n<|im_start|>user\nQuestion {turn + 1}?<|im_end|>\n" + tito.generation_prompt(kwargs)
        )
        messages.extend(new)
        context = checkpoint + list(fragment.ids)
        assert len(context) == len(checkpoint) + len(fragment.ids)
    text = tito.decode(context)
    for reasoning in reasonings:
        assert text.count(reasoning) == 1
    assert text.count("<|im_start|>assistant\n") == 4
    full = tito.encode_full(messages, None, kwargs)
    assert all(r not in tito.decode(full) for r in reasonings)
    report = audit_drift(context, full, tito)
    assert report.kind is DriftKind.REASONING_STRIPPED
    assert "<think>" in report.tito_snippet and "<think>" not in report.canonical_snippet
