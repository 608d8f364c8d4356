"""``merge_completions``: the one-choice completions of an ``n > 1`` request put together (pure)."""

from __future__ import annotations

from openai.types.chat import ChatCompletion

from proxy.api import AssistantTurn, CompletionMeta, TokenExtras, Usage, render_completion
from proxy.controllers.choices import merge_completions

META = CompletionMeta("chatcmpl-1", 1_800_000_000, "qwen3")
PROMPT = [1, 2, 3, 4]


def choice(index: int, text: str, ids: list[int], prompt: list[int] | None) -> dict:
    extras = TokenExtras(prompt_token_ids=prompt, token_ids=ids, token_logprobs=[-0.5] * len(ids),
                         weight_versions=["v1"] * len(ids))
    usage = Usage(len(PROMPT), len(ids))
    return render_completion(META, AssistantTurn(text), usage, extras=extras, index=index)


def test_choices_keep_their_index_and_usage_counts_the_prompt_once() -> None:
    merged = merge_completions(
        [choice(0, "a", [7, 8], PROMPT), choice(1, "b", [9], None), choice(2, "c", [5, 6, 4], None)]
    )
    assert [c["index"] for c in merged["choices"]] == [0, 1, 2]
    assert [c["message"]["content"] for c in merged["choices"]] == ["a", "b", "c"]
    assert merged["usage"] == {"prompt_tokens": 4, "completion_tokens": 6, "total_tokens": 10}
    assert (merged["id"], merged["created"], merged["model"]) == (META.id, META.created, META.model)
    # The prompt once at the top level; each choice's own token fields inside it.
    assert merged["prompt_token_ids"] == PROMPT and "token_ids" not in merged
    assert [c["token_ids"] for c in merged["choices"]] == [[7, 8], [9], [5, 6, 4]]
    assert all("prompt_token_ids" not in c for c in merged["choices"])
    assert merged["choices"][2]["weight_versions"] == ["v1"] * 3
    parsed = ChatCompletion.model_validate(merged)
    assert parsed.choices[1].model_extra["token_ids"] == [9] and parsed.usage.total_tokens == 10


def test_a_choice_whose_prompt_differs_carries_its_own_prompt_ids() -> None:
    merged = merge_completions([choice(0, "a", [7], PROMPT), choice(1, "b", [9], [1, 2, 3, 9])])
    assert merged["prompt_token_ids"] == PROMPT
    assert merged["choices"][1]["prompt_token_ids"] == [1, 2, 3, 9]


def test_without_the_token_extension_nothing_is_added() -> None:
    plain = [render_completion(META, AssistantTurn(text), Usage(4, 1), index=i) for i, text in enumerate("ab")]
    merged = merge_completions(plain)
    assert set(merged) == {"id", "object", "created", "model", "choices", "usage"}
    assert all(set(c) == {"index", "message", "logprobs", "finish_reason"} for c in merged["choices"])
