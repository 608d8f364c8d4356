"""The GLM and MiniMax TITO batteries (``tests/tokenization/test_{glm,minimax}_properties.py``: their seeded episodes
and ``check_episode``) run on renderers behind our TITO interface (``renderers_adapter``), counting which property
fails first per episode. Not a test (renderers is not a dependency); after ``pip install renderers==0.1.12``:

    N=300 RETENTION=all .venv/bin/python -m tests.families.renderers_battery glm4_7 minimax_m2
"""
import collections
import os
import random
import sys
import traceback

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
from tests.families.renderers_adapter import family_pair
from tests.tokenization import test_glm_properties as glm
from tests.tokenization import test_minimax_properties as minimax
from tests.tokenization.random_scripts import random_script

N = int(os.environ.get("N", "300"))


def main(families: list[str]) -> None:
    for family in families:
        extra = {"thinking_retention": os.environ["RETENTION"]} if os.environ.get("RETENTION") else {}
        _, theirs = family_pair(family, **extra)
        battery = minimax if family.startswith("minimax") else glm
        outcomes: collections.Counter = collections.Counter()
        for seed in range(N):
            rng = random.Random(seed)
            script = random_script(family, rng, max_steps=8)
            if battery is glm:
                script = glm.GlmScript.of(script, glm._glm_extra(family, rng))
            else:
                script = minimax._with_extra(script, rng)
            try:
                battery.check_episode(theirs, script)
                outcomes["pass"] += 1
            except AssertionError:
                frame = traceback.extract_tb(sys.exc_info()[2])[-1]
                outcomes[f"fails at {os.path.basename(frame.filename)}:{frame.lineno} {frame.line}"] += 1
            except Exception as exc:  # noqa: BLE001 - a refusal or crash is an outcome to count
                outcomes[f"raised {type(exc).__name__}: {str(exc)[:80]}"] += 1
        print(family, dict(extra), f"{N} seeded episodes:")
        for outcome, count in outcomes.most_common():
            print("   ", count, outcome)


if __name__ == "__main__":
    main(sys.argv[1:])
