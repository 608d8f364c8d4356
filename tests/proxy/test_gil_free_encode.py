"""``TitoTokenizer.encode_text`` encodes through ``encode_batch_fast`` (no character offsets; it releases the GIL, so
a worker thread's encode leaves the event loop free, ``proxy/controllers/off_loop.py``): the ids must be exactly
those of ``encode`` at every length, special-token strings and text the tokenizer normalizes included."""

from __future__ import annotations

import pytest

from proxy.families import load_tito_tokenizer

PIECES = (
    "Plain words, punctuation; numbers 12345 and 3.14.\n",
    "<|im_start|>user\nA turn<|im_end|>\n",
    "Unicode: café, cafe\u0301 (NFC), 東京, emoji 🐎, tabs\t\tand   spaces\n\n",
    "<think>\nreasoning\n</think>\n\n",
)


@pytest.mark.parametrize("model", ["qwen3", "qwen3_5"])
@pytest.mark.parametrize("length", [1, 7, 60, 4095, 4096, 20487])
def test_encode_text_gives_the_ids_of_encode_whatever_the_length(model, length, qwen3_path, qwen3_5_path):
    path = qwen3_path if model == "qwen3" else qwen3_5_path
    tito = load_tito_tokenizer(model, path)
    for shift in range(len(PIECES)):
        text = "".join(PIECES[shift:] + PIECES[:shift]) * (length // 100 + 1)
        text = text[:length]
        assert tito.encode_text(text) == tito._tokenizer.encode(text, add_special_tokens=False).ids
