"""Errors of the session layer, each with the stable OpenAI error ``code`` and HTTP status the API layer answers."""

from __future__ import annotations

from typing import ClassVar


class SessionError(Exception):
    """Base of the errors a request can get from the session layer; nothing was recorded when one is raised."""

    code: ClassVar[str] = "session_error"
    http_status: ClassVar[int] = 400


class SessionFinalizedError(SessionError):
    """The session is no longer active (finalizing, finalized, drained or aborted): no generation, no commit."""

    code = "session_finalized"
    http_status = 400


class MaxStepsExceededError(SessionError):
    """The session holds ``DRESSAGE_PROXY_MAX_STEPS_PER_SESSION`` steps (generations in flight count as reserved)."""

    code = "max_steps_exceeded"
    http_status = 400

    def __init__(self, limit: int, steps: int, in_flight: int) -> None:
        self.limit, self.steps, self.in_flight = limit, steps, in_flight
        super().__init__(
            f"the session holds {steps} step(s) and {in_flight} in flight; the limit is {limit} "
            f"(DRESSAGE_PROXY_MAX_STEPS_PER_SESSION); the session is not finalized"
        )


class ResponseMaskMismatchError(SessionError):
    """A client-supplied ``response_mask`` does not have one entry per context token added by this step."""

    code = "response_mask_mismatch"
    http_status = 422

    def __init__(self, expected: int, got: int) -> None:
        self.expected, self.got = expected, got
        super().__init__(f"response_mask has {got} entries; this step adds {expected} context tokens")


class InvalidMessagesError(SessionError):
    """The request's messages cannot be trie edges (not objects, no role, none at all)."""

    code = "invalid_messages"
    http_status = 400


class SessionAbortedError(SessionError):
    """Finalize of a session that was aborted (or whose export failed): there is nothing to export."""

    code = "session_aborted"
    http_status = 409


class ExportFailedError(SessionError):
    """Finalize could not export or store the session's segments: a bug (logged with the session id), or a store
    that failed. Nothing is lost: the session keeps every committed step, and the next finalize retries the export.
    The message names neither the exception's text nor a traceback (they are in the log)."""

    code = "export_failed"
    http_status = 500

    def __init__(self, session_id: str, steps: int, failure: str) -> None:
        self.session_id, self.steps = session_id, steps
        super().__init__(
            f"finalize could not store session {session_id!r} ({failure}; logged as a bug); its {steps} committed "
            f"step(s) are kept: POST /session/finalize again to retry the export"
        )


class TrajectoryVersionChangedError(SessionError):
    """Without partial rollout, a step would be (or was) generated under another rollout epoch or weight version
    than the session's earlier steps (spec 7): the session's trajectory must be single-version."""

    code = "trajectory_version_changed"
    http_status = 400

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
