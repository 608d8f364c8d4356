"""renderers (PyPI, 0.1.12) against the DeepSeek TITO batteries (docs/families.md, "DeepSeek ... renderers").

For the seeded episodes of the DeepSeek batteries (``tests/tokenization/test_deepseek_properties.py``), every request: is
renderers' ``render_ids`` the reference's ids (the official encoder / template, tokenized by tokenizer.json)? Every
incremental step: does its ``bridge_to_next_turn`` (the previous prompt and completion, the new messages) refuse,
or give our checkpoint + fragment? Counted per thinking mode. renderers' ``deepseek-v4`` renderer is compared with
DeepSeek-V4, its ``deepseek-v3`` (non-reasoning) renderer with DeepSeek-V3.1; it has none for V3.2. Not a test
(renderers is not a dependency); run after ``pip install renderers==0.1.12`` (a scratch target is enough)::

    PYTHONPATH=/tmp/renderers N=200 .venv/bin/python -m tests.families.renderers_deepseek_eval deepseek_v4 deepseek_v3_1
"""

from __future__ import annotations

import collections
import os
import random
import sys

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from proxy.families import get_family, load_tito_tokenizer  # noqa: E402
from proxy.tokenization.messages import normalize_messages  # noqa: E402
from serving.tokenizer_files import ensure_tokenizers  # noqa: E402
from tests.families.renderers_adapter import TokenizerProtocol  # noqa: E402
from tests.tokenization.deepseek_models import MODELS  # noqa: E402
from tests.tokenization.deepseek_checks import with_extra  # noqa: E402
from tests.tokenization.random_scripts import random_script  # noqa: E402
from tests.tokenization.simulation import simulate  # noqa: E402

N = int(os.environ.get("N", "200"))


def renderer_for(renderers, family: str, protocol, kwargs: dict):
    if family == "deepseek_v4":
        effort = kwargs.get("reasoning_effort") or "low"
        config = renderers.DeepSeekV4RendererConfig(
            enable_thinking=bool(kwargs.get("thinking")), drop_thinking=kwargs.get("drop_thinking", True),
            reasoning_effort=effort,
        )
    else:
        config = renderers.DeepSeekV3RendererConfig()
    return renderers.create_renderer(protocol, config)


def main(families: list[str]) -> None:
    import renderers

    root = ensure_tokenizers()
    for family in families:
        model = MODELS[family]
        ours = load_tito_tokenizer(family, root / str(get_family(family).tokenizer_folder))
        protocol = TokenizerProtocol(ours)
        full, bridge = collections.Counter(), collections.Counter()
        for seed in range(N):
            rng = random.Random(seed)
            script = random_script(family, rng, max_steps=8)
            script = with_extra(script, model.extra(script, rng))
            kwargs = script.kwargs
            mode = {None: "unset", True: "on", False: "off"}[script.thinking]
            renderer = renderer_for(renderers, family, protocol, kwargs)
            sim = simulate(ours, script)
            tools = list(script.tools) if script.tools else None
            for k, step in enumerate(sim.steps):
                messages = normalize_messages(step.messages)
                reference = ours.encode_full(messages, tools, kwargs)
                try:
                    got = list(renderer.render_ids(messages, tools=tools, add_generation_prompt=True))
                    full[(mode, "equal" if got == reference else "differs")] += 1
                except Exception as exc:  # noqa: BLE001 - counted, it is the finding
                    full[(mode, f"raised {type(exc).__name__}")] += 1
                if k == 0:
                    continue
                previous = sim.steps[k - 1]
                new = messages[len(previous.messages) + 1 :]
                try:
                    result = renderer.bridge_to_next_turn(
                        list(previous.context), list(previous.generated), new, tools=tools
                    )
                except Exception as exc:  # noqa: BLE001
                    bridge[(mode, f"raised {type(exc).__name__}")] += 1
                    continue
                if result is None:
                    bridge[(mode, "refused")] += 1
                else:
                    same = list(result.token_ids) == list(step.context)
                    bridge[(mode, "equal to ours" if same else "DIFFERENT from ours")] += 1
        print(family, "full encode vs the reference:", dict(sorted(full.items())))
        print(family, "bridge vs our checkpoint + fragment:", dict(sorted(bridge.items())))


if __name__ == "__main__":
    main(sys.argv[1:])
