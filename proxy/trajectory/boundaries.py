"""Why a segment began: the ``boundary_reason`` recorded on every segment's first step (spec 5.4).

A step starts a new segment when its tokens come from a full encode instead of extending a checkpoint. Exactly one
reason applies, checked in this order by the session (see ``proxy/trajectory/session.py``):

========================  ==========================================================================================
reason                    when
========================  ==========================================================================================
``session_start``         nothing was committed in the session yet (the first turn; every best-of-N sample of it)
``context_changed``       the same message history has a checkpoint under other tools or chat-template kwargs
``new_conversation``      no message is shared with any earlier request in this context (a sub-agent with its own
                          system prompt, a new task)
``resample``              exactly the prompt of an earlier request, whose history holds no checkpoint (another
                          sample or a retry of a first turn)
``history_rewritten``     shares a message prefix with earlier requests, then differs before any checkpoint:
                          a condensation recap, an edited history, a warm start with assistant turns the proxy
                          never generated
``length_exhausted``      the checkpoint it continues ended at the token limit without the end-of-turn token
``no_end_of_turn``        the checkpoint it continues ended without the end-of-turn token for another reason (a stop
                          string, another stop token)
``tito_failed``           the incremental encode failed (template error, junction mismatch...): the step is flagged
                          ``concat_incremental_tokenization_failed`` and ``boundary_detail`` says why
========================  ==========================================================================================

A branch that forks from a checkpoint (best-of-N, a splice) does not start a segment: it extends the checkpoint and
its segment shares the prefix, which is trained in the segment that owns it (``forked_from_step``).
"""

from __future__ import annotations

import enum


class BoundaryReason(enum.Enum):
    """Why a segment's tokens start from a full encode; the value is what segments record."""

    SESSION_START = "session_start"
    CONTEXT_CHANGED = "context_changed"
    NEW_CONVERSATION = "new_conversation"
    RESAMPLE = "resample"
    HISTORY_REWRITTEN = "history_rewritten"
    LENGTH_EXHAUSTED = "length_exhausted"
    NO_END_OF_TURN = "no_end_of_turn"
    TITO_FAILED = "tito_failed"


__all__ = ["BoundaryReason"]
