"""Why a durable store did not open (the message says what to do; it never holds a password)."""

from __future__ import annotations


class StoreOpenError(RuntimeError):
    """The store named by ``--store`` cannot be opened."""


class StoreVersionError(StoreOpenError):
    """The store's schema is newer than this code (or, opened read-only, older): it is not opened."""


class StoreInUseError(StoreOpenError):
    """A SQLite store is open in another process (a SQLite store belongs to one proxy)."""


class StoreUnavailableError(StoreOpenError):
    """The database cannot be reached or refused the connection."""


__all__ = ["StoreInUseError", "StoreOpenError", "StoreUnavailableError", "StoreVersionError"]
