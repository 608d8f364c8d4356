"""The per-session prefix trie: every request's message list is a path; committed assistant nodes hold checkpoints.

Shape::

    root
     └─ context (tools + effective template kwargs)          one per ContextKey; a change never reuses tokens
         └─ system / user / tool message ...                  one node per message, keyed by MessageKey
             └─ assistant [checkpoint: newest Step]           variants (reasoning) of the same key are siblings
                 └─ tool / user ...  (pending until an answer below them commits)

Operations (each O(path length), plus the hashing of the request's own messages):

- :meth:`PrefixTrie.match` walks the request's messages from a context node, longest prefix first;
- :meth:`PrefixTrie.attach` adds the unmatched suffix as *pending* nodes: prompt structure only, never a
  checkpoint, never exported. The generation *holds* the node its answer will attach to until it commits or fails;
  :meth:`PrefixTrie.release` gives the hold back, and a generation that failed takes its pending structure with it
  (below);
- :meth:`PrefixTrie.nearest_checkpoint` is the deepest checkpoint on the path (the step a generation continues);
- :meth:`PrefixTrie.upsert_assistant` attaches a generated answer under its prompt: the same key and reasoning as an
  existing child refreshes that child (its checkpoint becomes the newest step: idempotent retry), anything else is
  a new sibling (best-of-N); :meth:`PrefixTrie.find_answer` finds that child without attaching anything (the
  session asks the refreshed step's chain what the refresh does to the export before it commits).

Which child an incoming message follows (the reasoning rule of spec 5.1): among the children with its key, the one
with the same reasoning if that one holds a checkpoint; else the most recently committed one whatever its
reasoning (an agent that drops or trims reasoning when echoing continues its chain; siblings that differ only in
reasoning are resolved to the latest committed); else the uncommitted one with the same reasoning; else the newest.

Failed generations leave nothing (``release``): a pending node lives only as long as an in-flight generation
holds it or a node below it, so the pending nodes are exactly the paths of the generations in flight. Holds are
counted per node (concurrent requests of one session may share pending nodes: two samples of one new prompt, or a
request that extends another's still-pending prompt), so a failure removes exactly the pending leaves no one else
needs, walking up while the parent is pending, unheld and childless; a context node left without children goes too.
A commit turns the path into committed structure (``set_checkpoint``), which is never removed. The holds live in a
dict of the trie, not in the nodes (only in-flight generations have one; nodes stay small).

The trie is plain data with no lock: the session controller owns it and mutates it only inside its short critical
sections.
"""

from __future__ import annotations

import enum
import types
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from proxy.trajectory.message_keys import ContextKey, MessageKey, PlainKey, reasoning_variant, same_message
from proxy.trajectory.packed_text import PackedText, plain_text, same_text
from proxy.trajectory.node_contents import ContextInfo, context_contents, stored_form, unpacked
from proxy.trajectory.tokens import Step

#: The signature of a shared context encoding on its attach node: the id of the step it extends, or FULL_ENCODE
#: (step ids start at 1). An int: ids up to 256 are Python's shared small ints, so a signature allocates nothing.
EncodingSignature = int
FULL_ENCODE: EncodingSignature = 0

# Builds a PlainKey from a (role, content) tuple without the class's own __new__ (a call less: TrieNode.key).
_plain_key = tuple.__new__


#: children of one node compared with an incoming message by echoed_prefix before giving up (the key is computed)
_ECHO_PROBES = 16

# The children of every leaf: shared, never written (see TrieNode.children).
_NO_CHILDREN: Mapping[Any, Any] = types.MappingProxyType({})
#: the holds of a trie no generation holds a node of (``PrefixTrie._holds``), read-only and shared
_NO_HOLDS: Mapping[Any, int] = types.MappingProxyType({})


class _OneKey(Mapping[Any, Any]):
    """A read-only mapping of one key, 48 bytes where a dict of one entry takes 232 (issue 21 item 5): the children
    of a node whose several children share one key (variants: answers that differ only in reasoning; one child is
    held as itself). ``variants`` is the value. Never mutated: the trie replaces it (by a dict once a second key
    comes)."""

    __slots__ = ("key", "variants")

    def __init__(self, key: Any, variants: tuple[Any, ...]) -> None:
        self.key, self.variants = key, variants

    def _has(self, key: Any) -> bool:
        # Identity first (an echoed message's key is the stored node's own), then the fields, as _with_key compares:
        # keys cache no hash, so comparing hashes first would compute two of them for nothing.
        return key is self.key or key == self.key

    def __getitem__(self, key: Any) -> Any:
        if self._has(key):
            return self.variants
        raise KeyError(key)

    def get(self, key: Any, default: Any = None) -> Any:
        return self.variants if self._has(key) else default

    def __iter__(self) -> Iterator[Any]:
        yield self.key

    def __len__(self) -> int:
        return 1


class _OneEncoding(Mapping[Any, tuple[Any, int]]):
    """A node's one shared context encoding as a read-only mapping ``{signature: (ids, holders)}``: 56 bytes where
    a _OneKey of an ``(ids, holders)`` tuple took 104 (issue 21 item 5; nearly every prompt node holds one). Never
    mutated: the node replaces it."""

    __slots__ = ("signature", "ids", "holders")

    def __init__(self, signature: Any, ids: Any, holders: int) -> None:
        self.signature, self.ids, self.holders = signature, ids, holders

    def __getitem__(self, signature: Any) -> tuple[Any, int]:
        if signature == self.signature:
            return self.ids, self.holders
        raise KeyError(signature)

    def __iter__(self) -> Iterator[Any]:
        yield self.signature

    def __len__(self) -> int:
        return 1


class NodeKind(enum.Enum):
    """What a trie node stands for."""

    ROOT = "the session's root"
    CONTEXT = "a context: tool schemas and effective chat-template kwargs"
    MESSAGE = "one message of a request's history, or a generated assistant answer"


@attrs.define(eq=False, weakref_slot=False)  # no weakrefs: 16 bytes less a node (issue 21 item 5)
class TrieNode:
    """One node: a context, or one message. Holds its own message only; the path is rebuilt via ``parent``."""

    # The key (read it as ``key``); a plain message's content (see node_contents.py).
    _key: MessageKey | ContextKey | str | PackedText | None
    # The message as first seen (prompt nodes) or as generated (committed answers), read as ``message``; ContextInfo
    # for contexts. A plain message's role, a string: the node is plain (see node_contents.py).
    _message: Any
    parent: TrieNode | None
    # Messages from the context node down to this node (the context node is 0).
    depth: int
    # key -> the children with that key, one per variant (almost always one: a tuple is the smallest container).
    # Compact forms (issue 21 item 5), read through _with_key and _groups: leaves (most answers) share one empty
    # read-only mapping until their first child; a node with one child (nearly every node of a conversation: one
    # next message) holds that child itself; several children under one key, a _OneKey; a dict from the second key.
    children: Mapping[Any, tuple[TrieNode, ...]] | TrieNode = _NO_CHILDREN
    # The newest step committed on this node (assistant answers only).
    checkpoint: Step | None = None
    # -1: no step was committed on this node or below it (the node is pending); else how many steps were committed on
    # this node itself (more than one: refreshed by identical answers). One slot for both (issue 21 item 5).
    _commits: int = -1
    # The context ids generations attached here encoded, by what they extend: siblings that encode the same
    # context share one copy (best-of-N over a prompt). Each entry is ``(ids, holders)``: the generations and steps
    # using it (a failed generation gives its use back; the last one out removes the entry). Created on first use;
    # one signature (the usual) is a _OneEncoding, not a dict (issue 21 item 5: about 250 bytes a step); once the one
    # step that holds it committed, that Step itself (``settle_encoding``: 56 bytes less a step). Read ``encodings``.
    _encodings: Mapping[Any, tuple[Any, int]] | Step | None = None

    @property
    def kind(self) -> NodeKind:
        """What the node stands for, from where it is (a message node is at depth 1 or more; a node's kind was a
        field, 8 bytes a node: issue 21 item 5)."""
        if self.depth:
            return NodeKind.MESSAGE
        return NodeKind.ROOT if self.parent is None else NodeKind.CONTEXT

    @property
    def commits(self) -> int:
        """How many steps were committed on this node (more than one: refreshed by identical answers)."""
        return max(self._commits, 0)

    @property
    def committed_below(self) -> bool:
        """A step was committed on this node or below it: the node is no longer pending."""
        return self._commits >= 0

    @property
    def key(self) -> Any:
        """The node's key (a plain message's built from its role and content: a new PlainKey, equal each time)."""
        role = self._message
        if type(role) is str:
            return _plain_key(PlainKey, (role, self._key))
        return self._key

    @property
    def variant(self) -> str | PackedText | None:
        """An assistant node's reasoning (the variant among siblings with the same key), read from its message, packed
        when long as ``reasoning_variant`` gives it: a slot of its own was 8 bytes of every node for the few that have
        one (issue 21 item 5); None otherwise."""
        stored = self._message
        return None if type(stored) is str else reasoning_variant(stored)  # a plain node has no reasoning

    @property
    def plain(self) -> bool:
        """The node holds a plain message as its role and content, with no key and no dict (see node_contents.py)."""
        return type(self._message) is str

    @property
    def message(self) -> Any:
        """The stored message (a plain one rebuilt, a packed content unpacked: a new dict each time, equal to the one
        stored)."""
        stored = self._message
        if type(stored) is str:
            return {"role": stored, "content": plain_text(self._key)}
        return unpacked(stored) if type(stored) is dict else stored

    def holds(self, message: Any) -> bool:
        """Whether the stored message is :func:`same_message` as ``message`` (identity first)."""
        stored = self._message
        if type(stored) is str:  # same_message against {"role": <str>, "content": <str>}, without building it
            return (type(message) is dict and len(message) == 2 and type(role := message.get("role")) is str
                    and role == stored and same_text(self._key, message.get("content")))
        return stored is message or same_message(stored, message)

    @property
    def encodings(self) -> Mapping[Any, tuple[Any, int]] | None:
        """The shared context encodings, ``{signature: (ids, holders)}`` (see ``_encodings``)."""
        encodings = self._encodings
        if type(encodings) is Step:  # the one step that holds the entry stands for it: a view of one entry
            return _OneEncoding(encoding_signature(encodings.base), encodings.stored_context, 1)
        return encodings

    def shared_encoding(self, signature: Any, ids: Any) -> Any:
        """``ids``, or equal ids already encoded here for the same ``signature`` (then stored only once).
        The caller holds the entry until :meth:`release_encoding` (a committed step keeps it for good)."""
        encodings = self.encodings
        known = encodings.get(signature) if encodings is not None else None
        if known is not None and known[0] == ids:
            self._set_encoding(signature, (known[0], known[1] + 1))
            return known[0]
        self._set_encoding(signature, (ids, 1))
        return ids

    def release_encoding(self, signature: Any, ids: Any) -> None:
        """A generation that used ``ids`` (as returned by :meth:`shared_encoding`) failed: give its use back."""
        encodings = self.encodings
        known = encodings.get(signature) if encodings is not None else None
        if known is None or known[0] is not ids:
            return  # replaced meanwhile by another encoding for the signature: nothing of this one is stored
        if known[1] > 1:
            self._set_encoding(signature, (known[0], known[1] - 1))
        elif type(encodings) is _OneEncoding:
            self._encodings = None
        else:
            del encodings[signature]
            if not encodings:
                self._encodings = None

    def settle_encoding(self, step: Step) -> None:
        """``step`` committed here with the encoding entry it alone holds: the step stands for the entry from now on
        (its signature and ids are the step's own), so the node keeps no _OneEncoding (issue 21 item 5)."""
        encodings = self._encodings
        if (type(encodings) is _OneEncoding and encodings.holders == 1 and encodings.ids is step.stored_context
                and encodings.signature == encoding_signature(step.base)):
            self._encodings = step

    def _set_encoding(self, signature: Any, entry: tuple[Any, int]) -> None:
        encodings = self.encodings
        if encodings is None or (type(encodings) is _OneEncoding and encodings.signature == signature):
            self._encodings = _OneEncoding(signature, *entry)
        elif type(encodings) is _OneEncoding:
            self._encodings = {encodings.signature: (encodings.ids, encodings.holders), signature: entry}
        else:
            encodings[signature] = entry

    def child_variants(self) -> Iterator[TrieNode]:
        """Every child, all variants."""
        for variants in _groups(self.children):
            yield from variants


def encoding_signature(base: Step | None) -> EncodingSignature:
    """The signature of an encoding that extends ``base`` (a full encode: none)."""
    return FULL_ENCODE if base is None else base.step_id


def _with_key(children: Mapping[Any, tuple[TrieNode, ...]] | TrieNode, key: Any) -> tuple[TrieNode, ...]:
    """The children (one per variant) with ``key`` among a node's ``children``; () when there is none."""
    if type(children) is TrieNode:
        return (children,) if _keyed(children, key) else ()
    return children.get(key, ())


def _keyed(node: TrieNode, key: Any) -> bool:
    """``node.key == key``, without building a plain node's key."""
    role = node._message
    if type(role) is str:
        return type(key) is PlainKey and key[0] == role and key[1] == node._key
    stored = node._key
    return stored is key or stored == key


def _groups(children: Mapping[Any, tuple[TrieNode, ...]] | TrieNode) -> Iterable[tuple[TrieNode, ...]]:
    """A node's children grouped by key, one tuple of variants per key."""
    return ((children,),) if type(children) is TrieNode else children.values()


@attrs.frozen
class TrieStatistics:
    """A frozen report of the trie's size (debug view, statistics)."""

    contexts: int
    nodes: int
    pending: int
    checkpoints: int


def _exact(variants: tuple[TrieNode, ...], variant: str | PackedText | None) -> TrieNode | None:
    """The child with exactly this reasoning, if any."""
    for node in variants:
        if node.variant == variant:
            return node
    return None


def _pick(variants: tuple[TrieNode, ...], variant: str | PackedText | None) -> TrieNode:
    """The child an incoming message with this reasoning follows (the rule in the module docstring)."""
    if len(variants) == 1 and (variants[0].variant == variant or variants[0].checkpoint is not None):
        return variants[0]
    exact = _exact(variants, variant)
    if exact is not None and exact.checkpoint is not None:
        return exact
    committed = [node for node in variants if node.checkpoint is not None]
    if committed:
        return max(committed, key=lambda node: node.checkpoint.step_id)
    if exact is not None:
        return exact
    return variants[-1]  # the newest: variants are kept in the order they were created (_new, _unlink)


def _echoed_child(node: TrieNode, message: Any) -> TrieNode | None:
    """The child of ``node`` storing a message :func:`same_message` as ``message`` (the first few children only)."""
    children = node.children
    if type(children) is TrieNode:  # one child, the usual node of a chain: no loop (issue 21 item 4)
        return children if children.holds(message) else None
    probes = 0
    for variants in _groups(children):
        for child in variants:
            if child.holds(message):
                return child
            probes += 1
            if probes == _ECHO_PROBES:
                return None
    return None


@attrs.define(eq=False)
class PrefixTrie:
    """One session's trie (see the module docstring)."""

    root: TrieNode = attrs.field(factory=lambda: TrieNode(None, None, None, 0))
    # Nodes below the root (contexts included), and how many of the message nodes are pending.
    size: int = 0
    pending: int = 0
    checkpoints: int = 0
    # Nodes held by in-flight generations (their attach nodes), with how many generations hold each.
    # An idle session's is the shared empty _NO_HOLDS: an empty dict was 64 bytes of every live session, and a dict
    # emptied after use keeps its table, 160 more (issue 21 item 5).
    _holds: Mapping[TrieNode, int] = attrs.field(default=_NO_HOLDS, repr=False)

    def _new(self, kind: NodeKind, key: Any, message: Any, parent: TrieNode,
             variant: str | PackedText | None = None) -> TrieNode:
        """Create a child of ``parent`` (the caller has checked it does not exist). ``variant`` is its message's
        reasoning (``TrieNode.variant``), as the caller's lookups computed it (a long one is then held as that packed
        text). Children with one key are kept in the order they were created."""
        depth = parent.depth + 1 if kind is NodeKind.MESSAGE else 0
        stored_key, stored_message = stored_form(key, message, variant)
        node = TrieNode(stored_key, stored_message, parent, depth)
        children = parent.children
        if children is _NO_CHILDREN:
            parent.children = node
        elif type(children) is TrieNode:
            parent.children = (_OneKey(key, (children, node)) if _keyed(children, key)
                               else {children.key: (children,), key: (node,)})
        elif type(children) is _OneKey:
            parent.children = (_OneKey(key, children.variants + (node,)) if children.key == key
                               else {children.key: children.variants, key: (node,)})
        else:
            children[key] = children.get(key, ()) + (node,)
        self.size += 1
        return node

    # -- contexts ---------------------------------------------------------------------------------------------------

    def context(self, key: ContextKey, tools: Sequence[Any] | None, template_kwargs: Mapping[str, Any]) -> TrieNode:
        """The context node for ``key``, created on first use."""
        found = _with_key(self.root.children, key)
        if found:
            return found[0]
        key, info = context_contents(key, tools, template_kwargs)
        return self._new(NodeKind.CONTEXT, key, info, self.root)

    def contexts(self) -> list[TrieNode]:
        """Every context node."""
        return [variants[0] for variants in _groups(self.root.children)]

    # -- walking ----------------------------------------------------------------------------------------------------

    def match(
        self, start: TrieNode, keys: Sequence[MessageKey], variants: Sequence[str | PackedText | None]
    ) -> tuple[TrieNode, int]:
        """The deepest node matching a prefix of the messages below ``start``, and how many messages matched."""
        node = start
        for index, key in enumerate(keys):
            children = _with_key(node.children, key)
            if not children:
                return node, index
            node = _pick(children, variants[index])
        return node, len(keys)

    def echoed_prefix(self, messages: Sequence[Any]) -> list[TrieNode]:
        """For the longest leading run of ``messages`` that are each :func:`same_message` as the message stored on
        one path below a context (the history a client echoes back), the node whose key and variant are the
        message's (``message_keys.py``: incremental keys).
        O(the run's text), compared in C; nothing is hashed.

        Read only, and exact whatever the trie does meanwhile: a node's key and variant were computed from its
        message, so they are those of an equal message even if the node is no longer on any path (every key of a
        session is computed under the session's one ``ignore_cch``: requests' and commits' alike)."""
        best: list[TrieNode] = []
        for variants in _groups(self.root.children):
            node: TrieNode | None = variants[0]
            found: list[TrieNode] = []
            for message in messages:
                node = _echoed_child(node, message)
                if node is None:
                    break
                found.append(node)
            if len(found) > len(best):
                best = found
                if len(best) == len(messages):  # the whole request: no other context can give more
                    break
        return best

    def attach(self, node: TrieNode, messages: Sequence[Any], keys: Sequence[MessageKey],
               variants: Sequence[str | PackedText | None] | None = None) -> TrieNode:
        """Add ``messages`` below ``node`` as pending nodes (the caller matched everything above); the last one is
        returned: it is where the generation's answer will attach, held by the caller until :meth:`release`.
        ``variants``: the messages' reasoning variants as the caller computed them (then not packed again)."""
        for index, (message, key) in enumerate(zip(messages, keys, strict=True)):
            node = self._new(NodeKind.MESSAGE, key, message, node, variants[index] if variants else None)
            self.pending += 1
        holds = self._holds
        if holds is _NO_HOLDS:
            holds = self._holds = {}
        holds[node] = holds.get(node, 0) + 1  # type: ignore[index]  # a dict once held
        return node

    def release(self, node: TrieNode) -> int:
        """Give back a hold that :meth:`attach` returned (the generation committed or failed). Pending nodes no
        generation needs any more go: from ``node`` up, while a node is pending, unheld and childless; then its
        context if that was left empty. Returns how many nodes were removed (O(that many))."""
        holds = self._holds
        held = holds[node] - 1
        if held:
            holds[node] = held  # type: ignore[index]  # a dict while anything is held
            return 0
        del holds[node]  # type: ignore[attr-defined]
        if not holds:
            self._holds = _NO_HOLDS
        removed = 0
        while (node.depth and node._commits < 0 and not node.children  # a pending message node, unused
               and node not in self._holds):
            parent = node.parent
            self._unlink(node)
            self.pending -= 1
            removed += 1
            node = parent
        if node.kind is NodeKind.CONTEXT and not node.children:
            self._unlink(node)
            removed += 1
        return removed

    def _unlink(self, node: TrieNode) -> None:
        """Remove a childless node from its parent."""
        parent = node.parent
        children = parent.children
        if type(children) is TrieNode:
            parent.children = _NO_CHILDREN
            self.size -= 1
            return
        if type(children) is _OneKey:
            remaining = tuple(other for other in children.variants if other is not node)
            if len(remaining) > 1:
                parent.children = _OneKey(node.key, remaining)
            else:  # one child left: held as itself (a _OneKey always had more than one)
                parent.children = remaining[0] if remaining else _NO_CHILDREN
            self.size -= 1
            return
        variants = children.pop(node.key)
        if len(variants) > 1:
            children[node.key] = tuple(other for other in variants if other is not node)
        elif not children:
            parent.children = _NO_CHILDREN
        self.size -= 1

    @property
    def holds(self) -> int:
        """Holds given out and not released (one per in-flight generation)."""
        return sum(self._holds.values())

    @staticmethod
    def nearest_checkpoint(node: TrieNode) -> Step | None:
        """The newest step of the deepest committed node on the path from ``node`` up to its context."""
        while node.depth:  # a message node (kind MESSAGE), without the property's call
            if node.checkpoint is not None:
                return node.checkpoint
            node = node.parent
        return None

    @staticmethod
    def context_of(node: TrieNode) -> TrieNode:
        """The context node above ``node``."""
        while node.depth:  # a message node (kind MESSAGE), without the property's call
            node = node.parent
        return node

    @staticmethod
    def messages(node: TrieNode) -> list[Any]:
        """The stored messages from the context down to ``node``."""
        found = []
        while node.depth:  # a message node (kind MESSAGE), without the property's call
            found.append(node.message)
            node = node.parent
        found.reverse()
        return found

    # -- committing -------------------------------------------------------------------------------------------------

    @staticmethod
    def find_answer(parent: TrieNode, key: MessageKey, variant: str | None) -> TrieNode | None:
        """The child of ``parent`` a generated answer with this key and reasoning would refresh, if there is one."""
        return _exact(_with_key(parent.children, key), variant)

    def upsert_assistant(
        self, parent: TrieNode, message: Any, key: MessageKey, variant: str | PackedText | None
    ) -> tuple[TrieNode, bool]:
        """The child of ``parent`` for a generated answer: the existing one with the same key and reasoning
        (returned with True if it already held a checkpoint: a refresh), or a new sibling."""
        existing = _exact(_with_key(parent.children, key), variant)
        if existing is not None:
            return existing, existing.checkpoint is not None
        # Counted pending until set_checkpoint marks it, like every other message node.
        self.pending += 1
        return self._new(NodeKind.MESSAGE, key, message, parent, variant), False

    def set_checkpoint(self, node: TrieNode, step: Step) -> None:
        """Record ``step`` as the newest checkpoint of ``node``; the path above stops being pending."""
        if node.checkpoint is None:
            self.checkpoints += 1
        node.checkpoint = step
        committed = node
        # Amortized O(1): stop at the first node already marked (everything above it is marked too).
        while node.depth and node._commits < 0:  # a message node, still pending
            node._commits = 0
            self.pending -= 1
            node = node.parent
        committed._commits += 1

    def statistics(self) -> TrieStatistics:
        """Sizes for the debug view."""
        return TrieStatistics(len(self.contexts()), self.size, self.pending, self.checkpoints)


__all__ = ["FULL_ENCODE", "ContextInfo", "EncodingSignature", "NodeKind", "PrefixTrie", "TrieNode", "TrieStatistics",
           "encoding_signature"]
