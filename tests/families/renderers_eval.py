"""renderers (PyPI) against our TITO on the property battery's generated episodes (docs/families.md).

For every request of every episode: is renderers' full encode (``render_ids``) the official template's ids? For
every incremental step: does its ``bridge_to_next_turn`` refuse, or equal our TITO fragment? Counted per thinking
mode and per what the step adds (tool results only, or a user/system turn). Not a test (renderers is not a
dependency); run it after ``pip install renderers==0.1.12``:

    .venv/bin/python -m tests.families.renderers_eval qwen3 qwen3_5          # N=200 episodes each
    RETENTION=all N=100 .venv/bin/python -m tests.families.renderers_eval qwen3  # thinking_retention="all"
"""
import collections
import os
import sys

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
from hypothesis import given, settings, HealthCheck, strategies as st
from tests.families.renderers_adapter import family_pair
from tests.tokenization.strategies import scripts
from tests.tokenization.simulation import simulate
N = int(os.environ.get("N", "200"))


def main(families: list[str]) -> None:
    for family in families:
        extra = {"thinking_retention": os.environ["RETENTION"]} if os.environ.get("RETENTION") else {}
        ours, theirs = family_pair(family, **extra)
        full = collections.Counter(); inc = collections.Counter(); episodes = collections.Counter()
        @settings(max_examples=N, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(data=st.data())
        def run(data):
            script = data.draw(scripts(family))
            sim = simulate(ours, script)  # our TITO, the model emitting the template's rendering
            mode = {None: "unset", True: "on", False: "off"}[script.thinking]
            episodes[mode] += 1
            for k, step in enumerate(sim.steps):
                messages = list(step.messages)
                official = ours.encode_text(ours.render_full(messages, script.tools, script.kwargs))
                try:
                    got = theirs.encode_full(messages, script.tools, script.kwargs)
                    full[(mode, "equal" if got == official else "differs")] += 1
                except Exception as exc:
                    full[(mode, f"raised {type(exc).__name__}")] += 1
                if step.fragment is None:
                    continue
                prev = sim.steps[k - 1]
                new = messages[len(prev.messages) + 1:]
                kind = "tool results only" if all(m["role"] == "tool" for m in new) else "with a user/system turn"
                try:
                    result = theirs.encode_incremental(prev.checkpoint, new, prior_messages=messages[: len(prev.messages) + 1],
                                                       tools=script.tools, chat_template_kwargs=script.kwargs)
                except Exception as exc:
                    inc[(mode, kind, f"raised {type(exc).__name__}: {str(exc)[:60]}")] += 1
                    continue
                if not result.ok:
                    inc[(mode, kind, "refused")] += 1
                else:
                    inc[(mode, kind, "equal to ours" if result.ids == step.fragment.ids else "DIFFERENT from ours")] += 1
        run()
        print(family, "episodes", dict(episodes))
        print(family, "full encode vs official template:", dict(sorted(full.items())))
        print(family, "incremental (renderers bridge vs our TITO fragment):")
        for key, n in sorted(inc.items()):
            print("   ", key, n)


if __name__ == "__main__":
    main(sys.argv[1:])
