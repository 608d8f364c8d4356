"""Text like an agent's turns, for the benches: slices of the Python standard library's own source.

Code, comments and docstrings, which every machine with Python has, and which tokenizes as a coding agent's turns do
(Qwen3: ~4.3 characters a token; 300 asked gave 302 on average over 200 slices, 201-503). The benches used to cycle
through short word lists; such text compresses 30-40x, this 2.3x, so once a session holds long messages compressed
(``proxy/trajectory/packed_text.py``) a figure taken on a word list would flatter it (docs/benchmarks.md, "Long
messages held packed, plain nodes, settled encodings").
"""

from __future__ import annotations

import functools
import sysconfig
from pathlib import Path

#: characters a token, about, for this text with the Qwen3 tokenizer (measured: docs/benchmarks.md)
CHARS_PER_TOKEN = 4.3


@functools.cache
def _corpus() -> str:
    """About 2 MB of the standard library's top-level modules, in name order."""
    parts, size = [], 0
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        parts.append(text)
        size += len(text)
        if size > 2_000_000:
            break
    return "\n".join(parts)


def real_text(tokens: int, salt: int) -> str:
    """About ``tokens`` tokens of source text; a different slice for every ``salt``."""
    corpus = _corpus()
    chars = max(1, round(tokens * CHARS_PER_TOKEN))
    start = (salt * 104_729) % (len(corpus) - chars)
    return corpus[start:start + chars]
