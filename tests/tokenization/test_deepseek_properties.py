"""The TITO property battery for DeepSeek-V3.1 (against its official template rendered by transformers), V3.2 and
V4 (against their official Python encoders, tokenized by the model's tokenizer.json).

Per family: DEEPSEEK_EPISODES (2,000 by default) seeded episodes plus the hypothesis property over
``strategies.scripts`` (tool loops with parallel tool results, reasoning, user interjections, unicode; ``thinking``
unset / true / false; V3.2/V4 ``drop_thinking=False``; V4 ``reasoning_effort`` ``max``/``high``). The property is
``deepseek_checks.check_episode``; the independent models of the references are ``deepseek_models``.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.families import load_tito_tokenizer

from .deepseek_checks import run_drawn, run_seeded
from .deepseek_models import MODELS, deepseek_folder
from .battery import BATTERY_SETTINGS


@pytest.fixture(scope="module", params=sorted(MODELS))
def deepseek(request, tokenizer_root):
    return load_tito_tokenizer(request.param, deepseek_folder(request.param, tokenizer_root)), MODELS[request.param]


@BATTERY_SETTINGS
@given(data=st.data())
def test_deepseek_tito_battery(deepseek, data):
    tito, model = deepseek
    run_drawn(tito, data, model.extra, model.predict, model.endings, model.shape)


def test_deepseek_tito_battery_seeded(deepseek):
    """DEEPSEEK_EPISODES seeded episodes; a failure names its seed."""
    tito, model = deepseek
    run_seeded(tito, model.extra, model.predict, model.endings, model.shape)
