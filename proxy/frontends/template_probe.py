"""What the served chat template does with a system message that is not first, probed once at start.

Agents put system text mid-conversation: Codex CLI a ``developer`` message after the first turns, Claude Code a
``system`` message after the first user message. Qwen3's template renders such a message as a system turn in its
place; Qwen3.5's refuses the request (``System message must be at the beginning``). A front end sends such a
message with the role :func:`system_role_inside` gives: ``system`` where the template renders it, ``user`` where it
refuses it (or would drop it silently). Folding it into the first system message instead would rewrite the start of
the prompt, and with it every checkpoint of the conversation.

(The Messages front end's route probes the same way; the two can share this function.)
"""

from __future__ import annotations

from typing import Any

from proxy.tokenization import TitoError

#: the text of the probe's system message (found in the render when the template shows it)
PROBE = "dressage-inner-system-probe"


def system_role_inside(tokenizer: Any) -> str:
    """``system`` when ``tokenizer``'s template renders a system message after a user message, else ``user``."""
    try:
        ids = tokenizer.encode_full([{"role": "user", "content": "a"}, {"role": "system", "content": PROBE}], None,
                                    None)
    except TitoError:
        return "user"
    return "system" if PROBE in tokenizer.decode(ids) else "user"


__all__ = ["PROBE", "system_role_inside"]
