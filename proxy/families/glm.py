"""GLM-4.7 and GLM-5.x (``proxy/tokenization/glm.py``: no end-of-turn token, the model stops on the next role).

One record per official template (their rendering rules differ in ways the TITO battery checks separately). All use
SGLang's ``glm47`` tool-call parser and ``glm45`` reasoning parser. GLM-5, 5.1 and 5.2 ship chat templates only; their
folders use GLM-4.7's tokenizer.json (docs/families.md, "GLM"). Detection: the template hash; the four versions
share the junction rules, so a non-official GLM template is taken structurally as ``glm4_7`` (or ``glm5_2`` when its
thinking-off prompt is ``<think></think>``).
Back ends: GLM-4.7 and GLM-5 render through the PyPI package ``renderers`` (its ``glm-5`` renderer passed every check
on both); GLM-5.1 and GLM-5.2 through ours (proxy/tokenization/renderers_backend.py, docs/families.md "renderers").
"""

from __future__ import annotations

from proxy.families.model_family import ModelFamily
from proxy.tokenization.glm import Glm51TitoTokenizer, Glm52TitoTokenizer, GlmTitoTokenizer
from proxy.tokenization.renderers_backend import RenderersGlm5TitoTokenizer, RenderersGlm47TitoTokenizer

_VERIFIED = (
    "property battery (2,000 episodes per template) vs the official template (transformers), "
    "tests/tokenization/test_glm_properties.py; parsers vs SGLang 0.5.23's glm47/glm45, tests/parsing/test_glm_*.py"
)


def _family(name: str, cls: type[GlmTitoTokenizer], aliases: tuple[str, ...], folder: str, what: str) -> ModelFamily:
    backend = getattr(cls, "backend", "own")
    return ModelFamily(
        name=name,
        aliases=aliases,
        tokenizer=cls,
        tool_call_parser="glm47",
        reasoning_parser="glm45",
        verified=_VERIFIED,
        template_sha256=(cls.TEMPLATE_SHA256,),
        tokenizer_folder=folder,
        description=what,
        tito_backend=backend,
    )


FAMILIES = (
    _family("glm4_7", RenderersGlm47TitoTokenizer, ("glm-4.7", "glm47"), "glm-4.7-flash",
            "GLM-4.7: role tokens, stops on <|observation|>/<|user|>, <arg_key>/<arg_value> tool calls"),
    _family("glm5", RenderersGlm5TitoTokenizer, ("glm-5",), "glm-5", "GLM-5: GLM-4.7's rendering, GLM-4.7's tokenizer"),
    _family("glm5_1", Glm51TitoTokenizer, ("glm-5.1", "glm51"), "glm-5.1",
            "GLM-5.1: reasoning kept verbatim, empty think blocks after the query"),
    _family("glm5_2", Glm52TitoTokenizer, ("glm-5.2", "glm52"), "glm-5.2",
            "GLM-5.2: <think></think> when thinking is off, reasoning-effort system turn"),
)
