"""Long message text as a session holds it: compressed, and compared by a digest (issue 21 item 5).

A session's trie keeps every message of its conversation, so that each request's echoed history can be compared with
what the session stored (spec 5.1: a changed earlier message is detected exactly). With long turns that text was
most of what a stored token cost beside its own ids and logprobs (docs/benchmarks.md, "Long messages held packed,
plain nodes, settled encodings"). A message key's content of at least :data:`PACK_AT` characters is a
:class:`PackedText` instead of a ``str``: the text's UTF-8 compressed with zstd, and a 128-bit XXH3 digest of it.
Shorter texts stay strings: below ~1 KB, zstd saves too little to pay for the two objects.

- **Equality is the digest's.** Two packed texts are equal when their digests are; an echoed message is compared with
  a stored one by digesting its text (:meth:`PackedText.matches`, ~0.2 us for 2 KB, against ~0.05 us for comparing
  two strings). The digest is seeded with a random value drawn at start, so a colliding pair cannot be prepared
  offline. A collision would make the session continue from the stored message's tokens: the record would still be
  what the model saw and what the export says (the stored text), only not what the client sent.
- **The text comes back exactly**: :attr:`PackedText.text` decompresses it (~3.5 us for 2 KB). Readers that need the
  text (exports, the viewer, a node's ``message``) read it there; the request path compares digests only.
  Lone surrogates, which a JSON body may carry and UTF-8 cannot, round-trip through ``surrogatepass``.

Why these libraries (measured, docs/benchmarks.md): zstd level 1 compresses 2 KB of English prose 2.07x in ~8 us,
where the standard library's zlib at level 1 takes ~47 us for the same ratio (each call sets up its tables); XXH3
digests 2 KB in ~0.2 us, where SHA-256 takes ~2 us and BLAKE2b more.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterable

import xxhash
import zstandard

#: texts of at least this many characters are held packed (the saving pays for the objects from about here)
PACK_AT = 1024

# Drawn once a process: digests are compared within the process only (a restarted proxy keys its replay afresh).
_SEED = secrets.randbits(64)
# zstd contexts are not safe to share between threads, and keys are computed off the event loop too (off_loop.py).
_CONTEXTS = threading.local()


def _digest(data: bytes) -> int:
    return xxhash.xxh3_128_intdigest(data, _SEED)


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _compressor() -> zstandard.ZstdCompressor:
    compressor = getattr(_CONTEXTS, "compressor", None)
    if compressor is None:
        compressor = _CONTEXTS.compressor = zstandard.ZstdCompressor(level=1)
    return compressor


def _decompressor() -> zstandard.ZstdDecompressor:
    decompressor = getattr(_CONTEXTS, "decompressor", None)
    if decompressor is None:
        decompressor = _CONTEXTS.decompressor = zstandard.ZstdDecompressor()
    return decompressor


class PackedText:
    """One long text, compressed, with its digest (the module docstring). Immutable; equal by digest."""

    __slots__ = ("digest", "_blob")

    def __init__(self, digest: int, blob: bytes) -> None:
        object.__setattr__(self, "digest", digest)
        object.__setattr__(self, "_blob", blob)

    @classmethod
    def of(cls, text: str) -> PackedText:
        data = _utf8(text)
        return cls._compressed(_digest(data), data)

    @classmethod
    def _compressed(cls, digest: int, data: bytes) -> PackedText:
        # A copy: the library's result keeps the allocation of its worst case, about the input's size (measured).
        return cls(digest, bytes(memoryview(_compressor().compress(data))))

    @property
    def text(self) -> str:
        """The text, exactly as packed."""
        return _decompressor().decompress(self._blob).decode("utf-8", "surrogatepass")

    @property
    def nbytes(self) -> int:
        """The compressed bytes held."""
        return len(self._blob)

    def matches(self, text: object) -> bool:
        """``text`` is a string with this digest (the text packed, but for a 2**-128 chance)."""
        return type(text) is str and _digest(_utf8(text)) == self.digest

    def __eq__(self, other: object) -> bool:
        if type(other) is not PackedText:
            return NotImplemented
        return self.digest == other.digest  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self.digest)

    def __repr__(self) -> str:
        return f"PackedText({self.digest:032x}, {self.nbytes} bytes)"

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("PackedText is immutable")

    def __reduce__(self) -> tuple[object, tuple[str]]:
        # Copied and pickled as its text, packed again: a digest means something only under this process's seed.
        return PackedText.of, (self.text,)


def packed(text: str, like: Iterable[PackedText] = ()) -> str | PackedText:
    """``text`` as a key holds it: packed from :data:`PACK_AT` characters, else the string itself. ``like``: packed
    texts already held; the one that is this text is returned instead of a new one (a digest, no compression: the
    text is held once)."""
    if len(text) < PACK_AT:
        return text
    data = _utf8(text)
    digest = _digest(data)
    for known in like:
        if known.digest == digest:
            return known
    return PackedText._compressed(digest, data)


def same_text(held: object, text: object) -> bool:
    """Whether ``text`` is the string ``held`` stands for (by value for a string, by digest when packed)."""
    if type(held) is PackedText:
        return held.matches(text)
    return type(text) is str and held == text


def plain_text(held: str | PackedText) -> str:
    """The string ``held`` stands for."""
    return held if type(held) is str else held.text


__all__ = ["PACK_AT", "PackedText", "packed", "plain_text", "same_text"]
