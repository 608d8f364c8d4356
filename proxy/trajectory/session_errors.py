"""Errors of the session layer, each with the stable OpenAI error ``code`` the API layer answers (its HTTP status is
the code's entry in ``proxy/api/errors.py``'s table: ``http_status``)."""

from __future__ import annotations

from typing import ClassVar

from proxy.api.error_mapping import CodedError
from proxy.api.errors import ERROR_TABLE, ErrorCode


class SessionError(CodedError):
    """Base of the errors a request can get from the session layer; nothing was recorded when one is raised."""

    code: ClassVar[str] = "session_error"

    @property
    def http_status(self) -> int:
        """The status the API answers for this error's code (the one table; 400 for a code it does not know)."""
        try:
            return ERROR_TABLE[ErrorCode(self.code)].status
        except ValueError:
            return 400


class SessionFinalizedError(SessionError):
    """The session is no longer active (finalizing, finalized, drained or aborted): no generation, no commit."""

    code = "session_finalized"


class MaxStepsExceededError(SessionError):
    """The session holds ``DRESSAGE_PROXY_MAX_STEPS_PER_SESSION`` steps (generations in flight count as reserved)."""

    code = "max_steps_exceeded"

    def __init__(self, limit: int, steps: int, in_flight: int) -> None:
        self.limit, self.steps, self.in_flight = limit, steps, in_flight
        super().__init__(
            f"the session holds {steps} step(s) and {in_flight} in flight; the limit is {limit} "
            f"(DRESSAGE_PROXY_MAX_STEPS_PER_SESSION); the session is not finalized"
        )


class ResponseMaskMismatchError(SessionError):
    """A client-supplied ``response_mask`` does not have one entry per context token added by this step."""

    code = "response_mask_mismatch"

    def __init__(self, expected: int, got: int) -> None:
        self.expected, self.got = expected, got
        super().__init__(f"response_mask has {got} entries; this step adds {expected} context tokens")


class InvalidMessagesError(SessionError):
    """The request's messages cannot be trie edges (not objects, no role, none at all)."""

    code = "invalid_messages"


class SessionAbortedError(SessionError):
    """Finalize of a session that was aborted (or whose export failed): there is nothing to export."""

    code = "session_aborted"


class ExportFailedError(SessionError):
    """Finalize could not export or store the session's segments: a bug (logged with the session id), or a store
    that failed. Nothing is lost: the session keeps every committed step, and the next finalize retries the export.
    The message names neither the exception nor a traceback (``failure``, the exception's class name, and the
    traceback are in the log)."""

    code = "export_failed"

    def __init__(self, session_id: str, steps: int, failure: str) -> None:
        self.session_id, self.steps, self.failure = session_id, steps, failure
        super().__init__(
            f"finalize could not store session {session_id!r} (logged as a bug); its {steps} committed "
            f"step(s) are kept: POST /session/finalize again to retry the export"
        )


class TrajectoryVersionChangedError(SessionError):
    """Without partial rollout, a step would be (or was) generated under another rollout epoch or weight version
    than the session's earlier steps (spec 7): the session's trajectory must be single-version."""

    code = "trajectory_version_changed"

    def __init__(self, held: object, offered: object) -> None:
        self.held, self.offered = held, offered
        super().__init__(
            f"the session's steps were generated at {held}; this step is at {offered} (a weight update or a "
            f"pause/resume came between them; without --dressage-partial-rollout a session is single-version: "
            f"finalize it and start a new one)"
        )


class GenerationFinishedError(RuntimeError):
    """A handle was committed twice (or after a drop): a bug in the caller; the first outcome stands."""


__all__ = [
    "ExportFailedError", "GenerationFinishedError", "InvalidMessagesError", "MaxStepsExceededError",
    "ResponseMaskMismatchError", "SessionAbortedError", "SessionError", "SessionFinalizedError",
    "TrajectoryVersionChangedError",
]
