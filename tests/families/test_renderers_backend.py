"""GLM-4.7 and GLM-5 render through the pinned PyPI package ``renderers`` (proxy/tokenization/renderers_backend.py).

The records name the back end (GLM-5.1/5.2 keep ours), and the ids the proxy records for those families are the
ones renderers itself gives: a renderer built here straight from the package (its ``glm-5`` renderer with
``thinking_retention="all"``) reproduces every full encode and every step's fragment of seeded GLM battery episodes,
including steps after a new user turn with thinking on (which its default retention refuses to bridge). That the
same ids equal the official template's is the GLM battery's job (tests/tokenization/test_glm_properties.py).
"""

from __future__ import annotations

import random

import pytest

from proxy.families import get_family, load_tito_tokenizer
from proxy.tokenization.renderers_backend import RenderersGlmMixin, TokenizerProtocol
from tests.tokenization.battery import ExtraScript
from tests.tokenization.glm_files import glm_path
from tests.tokenization.random_scripts import random_script
from tests.tokenization.simulation import simulate
from tests.tokenization.test_glm_properties import _glm_extra

renderers = pytest.importorskip("renderers", reason="renderers (a pinned dependency) is not installed: ./dev setup")

EPISODES = 25


def test_glm4_7_and_glm5_records_name_renderers_and_load_its_tokenizer():
    """(``dressage-proxy families`` shows the field: tests/families/test_families_command.py.)"""
    backends = {name: get_family(name).tito_backend for name in ("glm4_7", "glm5", "glm5_1", "glm5_2", "qwen3_5")}
    assert backends == {"glm4_7": "renderers", "glm5": "renderers", "glm5_1": "own", "glm5_2": "own",
                        "qwen3_5": "own"}
    for family in ("glm4_7", "glm5"):
        assert isinstance(load_tito_tokenizer(family, glm_path(family)), RenderersGlmMixin)
    assert not isinstance(load_tito_tokenizer("glm5_1", glm_path("glm5_1")), RenderersGlmMixin)


def _package_renderer(tito, kwargs):
    """renderers' own GLM-5 renderer for these template switches, built from the package directly."""
    fields = {"enable_thinking": kwargs.get("enable_thinking", True) is not False}
    fields.update({"clear_thinking": False} if kwargs.get("clear_thinking") is False else {"thinking_retention": "all"})
    return renderers.create_renderer(TokenizerProtocol(tito), renderers.GLM5RendererConfig(**fields))


@pytest.mark.parametrize("family", ["glm4_7", "glm5"])
def test_recorded_ids_are_renderers_own_full_encodes_and_bridges(family):
    tito = load_tito_tokenizer(family, glm_path(family))
    bridged = after_user_thinking = 0
    for seed in range(EPISODES):
        rng = random.Random(seed)
        script = ExtraScript.of(random_script(family, rng, max_steps=8), _glm_extra(family, rng))
        sim = simulate(tito, script)
        package = _package_renderer(tito, script.kwargs)
        tools = list(script.tools) if script.tools else None
        assert list(sim.steps[0].context) == package.render_ids(list(script.opening), tools=tools,
                                                                add_generation_prompt=True), f"seed {seed}"
        for previous, step in zip(sim.steps, sim.steps[1:]):
            new = list(step.messages[len(previous.messages) + 1 :])
            prompt_end = len(previous.context)
            theirs = package.bridge_to_next_turn(list(previous.checkpoint[:prompt_end]),
                                                 list(previous.checkpoint[prompt_end:]), new, tools=tools)
            assert theirs is not None, f"seed {seed}: renderers declined a bridge the proxy made"
            assert tuple(theirs.token_ids[len(previous.checkpoint) :]) == step.fragment.ids, f"seed {seed}"
            bridged += 1
            if any(m["role"] == "user" for m in new) and script.kwargs.get("enable_thinking") is not False:
                after_user_thinking += 1
    assert bridged > 2 * EPISODES and after_user_thinking > 0, (bridged, after_user_thinking)


def test_an_edited_template_renders_through_itself_not_renderers():
    """renderers hand-writes the official template: a folder whose template is edited (taken structurally as
    GLM-4.7) or another GLM version forced onto the record must render through its own template."""
    from proxy.tokenization.renderers_backend import RenderersGlm47TitoTokenizer
    from proxy.tokenization.tito import read_chat_template

    path = glm_path("glm4_7")
    official = load_tito_tokenizer("glm4_7", path)
    edited = RenderersGlm47TitoTokenizer(official._tokenizer, "{{ 'Edited.' }}" + read_chat_template(path),
                                         source="edited")
    messages = [{"role": "user", "content": "hi"}]
    assert official.uses_renderers and not edited.uses_renderers
    assert edited.encode_full(messages) == edited.encode_text(edited.render_full(messages))
    assert edited.decode(edited.encode_full(messages)).startswith("Edited.")
    forced = RenderersGlm47TitoTokenizer.from_path(glm_path("glm5_1"))
    assert not forced.uses_renderers
