"""Trajectory data: the per-session prefix trie, token storage with structural sharing, export, the store.

- ``message_keys``: canonical message and context keys (the matching rules of spec 5.1);
- ``tokens``: :class:`Step` (a checkpoint storing only the tokens it adds), :class:`WorkingTokens` (a generation's
  private state), path rebuilding;
- ``prefix_trie``: :class:`PrefixTrie` (match, attach pending nodes, nearest checkpoint, upsert an answer);
- ``boundaries``: :class:`BoundaryReason`, why a segment began;
- ``export``: segments in concat or last-step mode;
- ``store``: the :class:`TrajectoryStore` interface and the in-memory store;
- the session core, which ties them together under the session and chain state machines, pure and synchronous
  (its trio side, the locks and threads, is ``proxy/controllers/session_registry.py``): ``session`` (``Session``,
  one call per critical section), ``session_chains`` (its chains, driven by ``statemachines/branching.py``),
  ``encode_plan`` (request keys, the encode decision, the tokenizer protocol), ``session_config``,
  ``version_stamp``, ``session_results`` (what its calls answer) and ``session_errors``.
"""

from proxy.trajectory.boundaries import BoundaryReason
from proxy.trajectory.export import BuildMode, ExportOptions, SessionExport, export_segments, trajectory_id
from proxy.trajectory.message_keys import ContextKey, MessageKey, MessageKeyError, context_key, message_key
from proxy.trajectory.prefix_trie import PrefixTrie, TrieNode, TrieStatistics
from proxy.trajectory.memory_store import InMemoryTrajectoryStore
from proxy.trajectory.store import ReadResult, StoreStatistics, TrajectoryStore
from proxy.trajectory.tokens import RoutedChunk, Step, TokenSpan, WorkingTokens

__all__ = [
    "BoundaryReason",
    "BuildMode",
    "ContextKey",
    "ExportOptions",
    "InMemoryTrajectoryStore",
    "MessageKey",
    "MessageKeyError",
    "PrefixTrie",
    "ReadResult",
    "RoutedChunk",
    "SessionExport",
    "Step",
    "StoreStatistics",
    "TokenSpan",
    "TrajectoryStore",
    "TrieNode",
    "TrieStatistics",
    "WorkingTokens",
    "context_key",
    "export_segments",
    "message_key",
    "trajectory_id",
]
