"""``TitoTokenizer.encode_text`` encodes long texts through ``encode_batch`` (which releases the GIL, so a worker
thread's encode leaves the event loop free, ``proxy/controllers/off_loop.py``): the ids must be exactly those of
``encode``, on both sides of the threshold, special-token strings and text the tokenizer normalizes included."""

from __future__ import annotations

import pytest

from proxy.families import load_tito_tokenizer
from proxy.tokenization.tito import GIL_FREE_ENCODE_CHARS

PIECES = (
    "Plain words, punctuation; numbers 12345 and 3.14.\n",
    "<|im_start|>user\nA turn<|im_end|>\n",
    "Unicode: café, cafe\u0301 (NFC), 東京, emoji 🐎, tabs\t\tand   spaces\n\n",
    "<think>\nreasoning\n</think>\n\n",
)


@pytest.mark.parametrize("model", ["qwen3", "qwen3_5"])
@pytest.mark.parametrize("length", [GIL_FREE_ENCODE_CHARS - 1, GIL_FREE_ENCODE_CHARS, 5 * GIL_FREE_ENCODE_CHARS + 7])
def test_encode_text_gives_the_ids_of_encode_whatever_the_length(model, length, qwen3_path, qwen3_5_path):
    path = qwen3_path if model == "qwen3" else qwen3_5_path
    tito = load_tito_tokenizer(model, path)
    for shift in range(len(PIECES)):
        text = "".join(PIECES[shift:] + PIECES[:shift]) * (length // 100 + 1)
        text = text[:length]
        assert tito.encode_text(text) == tito._tokenizer.encode(text, add_special_tokens=False).ids
