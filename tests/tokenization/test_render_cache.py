"""The fragment render cache (``proxy/tokenization/render_cache.py``) never serves a render the template would not
have made: every fragment rendered through it equals the template's own render of the same messages, tools and
kwargs (the official Qwen3 template via transformers), whatever the texts (tool-response wrappers, think tags,
whitespace, empty), roles, kwargs and tools; a repeated shape is served from the cache; templates that inspect or
copy texts in ways the cache cannot replay are rendered every time."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.utils.chat_template_utils import render_jinja_template

from proxy.families import load_tito_tokenizer
from proxy.tokenization.render_cache import ShapeRenderCache, opaque_template
from proxy.tokenization.tito import ANCHOR, ANCHOR_QUERY

SYNTHETIC = [{"role": "user", "content": ANCHOR_QUERY}, {"role": "assistant", "content": ANCHOR}]
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather.",
                                         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
PIECES = ["<tool_response>", "</tool_response>", "</think>", "<think>", " ", "\n", "x", "Paris", "é", "\t", "",
          "<|im_end|>", "{}", '"', "\\"]
texts = st.lists(st.sampled_from(PIECES), max_size=5).map("".join)
messages = st.lists(st.builds(lambda role, content: {"role": role, "content": content},
                              st.sampled_from(["user", "tool", "system"]), texts), min_size=1, max_size=3)
kwargs = st.sampled_from([{}, {"enable_thinking": False}, {"enable_thinking": True}])


@pytest.fixture(scope="module")
def qwen3(qwen3_path: Any) -> Any:
    return load_tito_tokenizer("qwen3", qwen3_path)


@settings(max_examples=150, deadline=None)
@given(new=messages, template_kwargs=kwargs, with_tools=st.booleans())
def test_a_fragment_through_the_cache_is_the_templates_render(qwen3: Any, new: list[dict[str, Any]],
                                                              template_kwargs: dict[str, Any],
                                                              with_tools: bool) -> None:
    tools = [TOOL] if with_tools else None
    assert qwen3._fragment_renders.enabled  # Qwen3's template is one the cache serves
    expected = qwen3._render(SYNTHETIC + new, tools, template_kwargs, add_generation_prompt=True)
    assert qwen3._render_fragment(list(SYNTHETIC), new, tools, template_kwargs) == expected
    # and again, now possibly from the cache
    assert qwen3._render_fragment(list(SYNTHETIC), new, tools, template_kwargs) == expected


def real(template: str, messages: list[dict[str, Any]], **kw: Any) -> str:
    return render_jinja_template(conversations=[messages], chat_template=template, add_generation_prompt=False,
                                 **kw)[0][0]


def through(cache: ShapeRenderCache, template: str, messages: list[dict[str, Any]], **kw: Any) -> str:
    return cache.render(messages, None, kw, False, 0, lambda: real(template, messages, **kw))


def test_a_repeated_shape_is_served_from_the_cache_and_kwargs_or_roles_never_share_an_entry() -> None:
    template = ("{% for m in messages %}{% if m.content.startswith('<x>') %}X{% endif %}"
                "{{ '[' + m.role + ']' + m.content }}{% if flag %}!{% endif %}{% endfor %}")
    cache = ShapeRenderCache(template)
    assert cache.enabled
    cases = [
        ([{"role": "user", "content": "one"}], {}),
        ([{"role": "user", "content": "two"}], {}),  # same shape: a hit
        ([{"role": "user", "content": "<x>three"}], {}),  # the recorded answer differs: rendered, a variant
        ([{"role": "user", "content": "<x>four"}], {}),  # the variant's hit
        ([{"role": "system", "content": "five"}], {}),  # another role: another shape
        ([{"role": "user", "content": "six"}], {"flag": True}),  # other kwargs: another shape
    ]
    for messages, kw in cases:
        assert through(cache, template, messages, **kw) == real(template, messages, **kw)
    assert cache.hits == 2


@pytest.mark.parametrize("template", [
    "{% for m in messages %}{{ m.content|trim }}{% endfor %}",  # a method that returns text: not replayable
    "{% for m in messages %}{{ m.content[1:] }}{% endfor %}",  # slicing
    "{% for m in messages %}{{ m.content.split('a')[0] }}{% endfor %}",
])
def test_a_template_that_reshapes_a_text_is_rendered_every_time(template: str) -> None:
    cache = ShapeRenderCache(template)
    for content in (" a ", "ba", " c", "dd "):
        messages = [{"role": "user", "content": content}]
        assert through(cache, template, messages) == real(template, messages)
    assert cache.hits == 0


@pytest.mark.parametrize("template", [
    "{% for m in messages %}{% if (m.content ~ '')|trim == m.content %}T{% endif %}{% endfor %}",
    "{% for m in messages %}{% if m.content|string|trim == m.content %}T{% endif %}{% endfor %}",
    "{% macro v(c) %}{{ c }}{% endmacro %}{% for m in messages %}{% if v(m.content)|trim %}T{% endif %}{% endfor %}",
    "{% for m in messages %}{% set c %}{{ m.content }}{% endset %}{{ c.strip() }}{% endfor %}",
    "{% for m in messages %}{{ '%s' % (m.content,) }}{% endfor %}",
])
def test_a_template_that_can_copy_a_text_out_of_sight_is_never_cached(template: str) -> None:
    """A plain copy of a text escapes the probe's record: such templates are rendered every time."""
    assert not opaque_template(template)
    cache = ShapeRenderCache(template)
    for content in (" a ", "b", " a ", "b"):
        messages = [{"role": "user", "content": content}]
        assert through(cache, template, messages) == real(template, messages)
    assert cache.hits == 0


def test_an_escaped_copy_of_a_text_is_caught() -> None:
    """``tojson`` hands the probe to the JSON encoder, which reads its characters directly: the escaped copy still
    shows the probe's tag, so the shape is not cached."""
    template = "{% for m in messages %}{{ m.content|tojson }}{% endfor %}"
    cache = ShapeRenderCache(template)
    for content in ('a"b', "c", 'a"b'):
        messages = [{"role": "user", "content": content}]
        assert through(cache, template, messages) == real(template, messages)
    assert cache.hits == 0
