"""Bodies of the rollout-facing endpoints (spec 4), validated into frozen values.

Same discipline as the chat request: each ``from_json(body)`` takes the parsed JSON body (anything at all) and
returns the value or raises :class:`~proxy.api.errors.ApiError` (``invalid_request``, 400), never another
exception. Unknown fields are ignored; ``null`` means absent; ids follow :func:`proxy.api.fields.identifier`
(1-256 printable ASCII characters, an integer is taken as its decimal string).

| endpoint | body | value |
|---|---|---|
| ``POST /session/finalize`` | ``{"session_id", "instance_id"?, "rollout_id"?, "reward_info"?}`` | :class:`FinalizeRequest` |
| ``POST /trajectory/read`` | ``{"session_id"?, "trajectory_id"?, "drain"?}``, at least one id | :class:`TrajectoryReadRequest` |
| ``POST /trajectory/ack`` | ``{"lease_id"}`` | :class:`AckRequest` |
| ``POST /v1/rollout/resume`` | ``{"weight_version"?}`` or no body | :class:`ResumeRequest` |

Decisions:

- ``reward_info`` is any JSON **object** (a bare number or string is refused with a hint to wrap it, e.g.
  ``{"reward": 1.0}``): it is copied into every exported segment of the session, and an object is what trainers
  index into. It is checked to be JSON at most 100 levels deep.
- ``/trajectory/read`` needs ``session_id`` or ``trajectory_id`` (both: the segment must belong to the session,
  which the store checks). A read with neither would return, and with ``drain`` lease away, every stored segment:
  too easy to do by accident, so it is refused. ``drain`` defaults to false. A ``trajectory_id`` is
  ``"<session id>:<segment index>"``, so it may be up to 512 characters.
- ``lease_id`` (``/trajectory/ack``) is the opaque id a draining read answered: a string of 1 to
  :data:`MAX_LEASE_ID_LENGTH` printable ASCII characters (the proxy never made another kind). It is only looked up,
  so an id the store does not hold (never leased, expired, acknowledged already) is not an error but
  ``{"acknowledged": 0}``: acknowledging is idempotent and a trainer retrying a lost ack needs no special case.
- ``weight_version`` is a non-empty string (SGLang reports versions as strings); an integer is accepted and taken as
  its decimal string, since trainers often count versions. An empty body, ``{}`` or ``null`` means "no new version".
"""

from __future__ import annotations

from typing import Any

import attrs

from proxy.api.errors import ApiError
from proxy.api.fields import (
    INT64_MAX,
    INT64_MIN,
    MAX_ID_LENGTH,
    check_json,
    identifier,
    json_type,
    optional_bool,
    optional_identifier,
    require_object,
)

#: a trajectory id is "<session id>:<segment index>"
MAX_TRAJECTORY_ID_LENGTH = 2 * MAX_ID_LENGTH
#: the longest accepted lease id (the stores make ids of a few dozen characters)
MAX_LEASE_ID_LENGTH = 256
#: the longest accepted weight-version label
MAX_WEIGHT_VERSION_LENGTH = 256


@attrs.frozen
class FinalizeRequest:
    """``POST /session/finalize``: close the session and export its segments."""

    session_id: str
    instance_id: str | None = None
    rollout_id: str | None = None
    reward_info: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, body: Any) -> FinalizeRequest:
        body = require_object(body)
        session_id = body.get("session_id")
        if session_id is None or session_id == "":
            raise ApiError.invalid_request("session_id is required", "session_id")
        reward_info = body.get("reward_info")
        if reward_info is not None and not isinstance(reward_info, dict):
            raise ApiError.invalid_request(
                f"reward_info must be a JSON object (for example {{\"reward\": 1.0}}), not {json_type(reward_info)}",
                "reward_info",
            )
        return cls(
            session_id=identifier(session_id, "session_id"),
            instance_id=optional_identifier(body, "instance_id"),
            rollout_id=optional_identifier(body, "rollout_id"),
            reward_info=check_json(reward_info, "reward_info"),
        )


@attrs.frozen
class TrajectoryReadRequest:
    """``POST /trajectory/read``: the finalized segments of a session, or one segment; ``drain`` leases them until
    ``POST /trajectory/ack`` deletes them."""

    session_id: str | None = None
    trajectory_id: str | None = None
    drain: bool = False

    @classmethod
    def from_json(cls, body: Any) -> TrajectoryReadRequest:
        body = require_object(body)
        session_id = optional_identifier(body, "session_id")
        trajectory_id = optional_identifier(body, "trajectory_id", max_length=MAX_TRAJECTORY_ID_LENGTH)
        if session_id is None and trajectory_id is None:
            raise ApiError.invalid_request("give session_id or trajectory_id (or both)", "session_id")
        return cls(session_id, trajectory_id, bool(optional_bool(body, "drain")))


@attrs.frozen
class AckRequest:
    """``POST /trajectory/ack``: delete the segments a draining read leased (the second phase of a drain)."""

    lease_id: str

    @classmethod
    def from_json(cls, body: Any) -> AckRequest:
        body = require_object(body)
        lease_id = body.get("lease_id")
        if lease_id is None or lease_id == "":
            raise ApiError.invalid_request("lease_id is required (the lease_id a draining read answered)", "lease_id")
        if not isinstance(lease_id, str):
            # An integer is no lease id the proxy made: refused rather than turned into a string that matches nothing.
            raise ApiError.invalid_request(f"lease_id must be a string, not {json_type(lease_id)}", "lease_id")
        return cls(identifier(lease_id, "lease_id", max_length=MAX_LEASE_ID_LENGTH))


@attrs.frozen
class ResumeRequest:
    """``POST /v1/rollout/resume``: resume generation, optionally announcing the new weight version."""

    weight_version: str | None = None

    @classmethod
    def from_json(cls, body: Any) -> ResumeRequest:
        if body is None:
            return cls()
        body = require_object(body)
        version = body.get("weight_version")
        if version is None:
            return cls()
        if isinstance(version, int) and not isinstance(version, bool) and INT64_MIN <= version <= INT64_MAX:
            version = str(version)
        if not isinstance(version, str):
            raise ApiError.invalid_request(
                f"weight_version must be a string, not {json_type(version)}", "weight_version"
            )
        if not version or len(version) > MAX_WEIGHT_VERSION_LENGTH or not version.isprintable():
            raise ApiError.invalid_request(
                f"weight_version must be 1 to {MAX_WEIGHT_VERSION_LENGTH} printable characters", "weight_version"
            )
        return cls(version)


__all__ = ["AckRequest", "FinalizeRequest", "ResumeRequest", "TrajectoryReadRequest"]
