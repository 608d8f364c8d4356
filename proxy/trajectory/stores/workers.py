"""The threads a durable store's database calls run on: never the event loop (``docs/storage.md``, "Durability").

:class:`TransactionWriter` owns the store's ONE write connection on a thread of its own. A call hands it an
*operation* (a function of the connection that runs the call's statements) and waits, on the event loop, for it to
be committed. **Group commit**: the writer takes every operation queued while the previous transaction ran and runs
them in one transaction, so 64 sessions committing steps at once share one commit (one fsync) instead of queueing
for 64. An operation that raises rolls the whole group back; each of the group's operations then runs again in a
transaction of its own, so one refused call never fails its neighbours (operations are re-runnable: they read
everything they decide on inside their transaction). With ``group=False`` every operation is its own transaction
(the bench's baseline).

An operation that must refuse *after* writing (``append_step`` creates a session's record, then finds the fence
stale, as the memory store does) returns :class:`Refused`: its writes commit, and the caller raises the error.

:class:`ReaderPool` runs read-only calls on trio's worker threads, each with a connection of its own from a small
pool (SQLite in WAL mode and PostgreSQL both let readers run beside the writer).

A caller cancelled while its operation is queued or running still waits for the outcome (shielded): an operation
handed to the writer commits or fails as a whole, and the caller must not return before it knows which.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

import attrs
import trio

log = logging.getLogger("proxy.trajectory.stores")

T = TypeVar("T")
Operation = Callable[[Any], Any]
#: the most operations one group commit takes (bounds a transaction's length under a flood)
MAX_GROUP = 512


class StoreClosedError(RuntimeError):
    """A call on a store that was closed."""


@attrs.frozen
class Refused(Generic[T]):
    """An operation's answer that commits its writes and then raises ``error`` in the caller."""

    error: BaseException


@attrs.frozen
class _Failed:
    """An operation's error, carried from the writer thread to its caller."""

    error: BaseException


@attrs.define(eq=False)
class _Job:
    operation: Operation
    token: trio.lowlevel.TrioToken
    done: trio.Event = attrs.field(factory=trio.Event)
    # The operation's return value, or _Failed (once ``answered``).
    result: Any = None
    answered: bool = False


_STOP = object()


@attrs.define(eq=False)
class TransactionWriter:
    """The write connection's thread (see the module docstring)."""

    # Opens the write connection (in autocommit mode: the writer issues BEGIN/COMMIT itself).
    connect: Callable[[], Any]
    begin: str
    group: bool = True
    # Whether a connection is unusable after an error (PostgreSQL: the server went away); it is reopened.
    broken: Callable[[Any], bool] = lambda connection: False
    name: str = "store-writer"
    # Set (the reason) for a store opened read-only: every write is refused with it, and no thread starts.
    refusal: str | None = None
    _queue: queue.SimpleQueue[Any] = attrs.field(factory=queue.SimpleQueue, init=False)
    _thread: threading.Thread | None = attrs.field(default=None, init=False)
    _connection: Any = attrs.field(default=None, init=False)
    _closed: bool = attrs.field(default=False, init=False)
    # Transactions committed and operations they carried (the bench reports the group size).
    transactions: int = attrs.field(default=0, init=False)
    operations: int = attrs.field(default=0, init=False)

    def start(self, connection: Any = None) -> None:
        """Start the thread; ``connection`` is an already open write connection to use first (optional)."""
        self._connection = connection
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._thread.start()

    async def run(self, operation: Operation) -> Any:
        """Run ``operation`` in a write transaction and return its result once committed (or raise its error)."""
        if self.refusal is not None:
            raise StoreClosedError(self.refusal)
        if self._closed:
            raise StoreClosedError("the trajectory store is closed")
        job = _Job(operation, trio.lowlevel.current_trio_token())
        self._queue.put(job)
        with trio.CancelScope(shield=True):
            await job.done.wait()
        value = job.result
        if isinstance(value, _Failed):
            raise value.error
        if isinstance(value, Refused):
            raise value.error
        return value

    async def aclose(self) -> None:
        """Finish every queued operation, then close the connection and end the thread."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        if self._thread is not None:
            await trio.to_thread.run_sync(self._thread.join)

    # -- the thread ----------------------------------------------------------------------------------------------

    def _loop(self) -> None:
        try:
            stopping = False
            while not stopping:
                first = self._queue.get()
                if first is _STOP:
                    break
                jobs = [first]
                while self.group and len(jobs) < MAX_GROUP:
                    try:
                        job = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if job is _STOP:
                        stopping = True
                        break
                    jobs.append(job)
                self._run(jobs)
        finally:
            if self._connection is not None:
                with contextlib.suppress(Exception):
                    self._connection.close()
                self._connection = None

    def _run(self, jobs: list[_Job]) -> None:
        try:
            if len(jobs) == 1:
                jobs[0].result, jobs[0].answered = self._transaction([jobs[0].operation])[0], True
            else:
                results = self._transaction([job.operation for job in jobs])
                if any(isinstance(result, _Failed) for result in results):
                    # One failed: the group rolled back. Each runs alone, so the others commit and only it fails.
                    results = [self._transaction([job.operation])[0] for job in jobs]
                for job, result in zip(jobs, results, strict=True):
                    job.result, job.answered = result, True
        except Exception as error:  # noqa: BLE001 - a bug here must not leave callers waiting forever
            log.exception("trajectory store writer: a group failed outside its transaction")
            for job in jobs:
                if not job.answered:
                    job.result, job.answered = _Failed(error), True
        for job in jobs:
            with contextlib.suppress(trio.RunFinishedError):
                job.token.run_sync_soon(job.done.set)

    def _transaction(self, operations: list[Operation]) -> list[Any]:
        """Run ``operations`` in one transaction: every result when it committed, else the error (``_Failed``) for
        all of them."""
        try:
            connection = self._open()
            connection.execute(self.begin)
        except Exception as error:  # noqa: BLE001 - the store is down: every caller gets the reason
            self._drop_if_broken()
            return [_Failed(error)] * len(operations)
        results: list[Any] = []
        try:
            for operation in operations:
                results.append(operation(connection))
            connection.execute("COMMIT")
        except Exception as error:  # noqa: BLE001 - rolled back; reported to the caller(s), who decide
            with contextlib.suppress(Exception):
                connection.execute("ROLLBACK")
            self._drop_if_broken()
            return [_Failed(error)] * len(operations)
        self.transactions += 1
        self.operations += len(operations)
        return results

    def _open(self) -> Any:
        if self._connection is None:
            self._connection = self.connect()
        return self._connection

    def _drop_if_broken(self) -> None:
        if self._connection is not None and self.broken(self._connection):
            with contextlib.suppress(Exception):
                self._connection.close()
            self._connection = None


@attrs.define(eq=False)
class ReaderPool:
    """Read-only calls on worker threads, each on a pooled connection (see the module docstring)."""

    connect: Callable[[], Any]
    begin: str
    broken: Callable[[Any], bool] = lambda connection: False
    # Connections (and threads) reads may use at once.
    size: int = 4
    _idle: list[Any] = attrs.field(factory=list, init=False)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False)
    _limiter: trio.CapacityLimiter | None = attrs.field(default=None, init=False)
    _closed: bool = attrs.field(default=False, init=False)

    async def run(self, operation: Callable[[Any], T]) -> T:
        """``operation(connection)`` in one read transaction, on a worker thread."""
        if self._closed:
            raise StoreClosedError("the trajectory store is closed")
        if self._limiter is None:
            self._limiter = trio.CapacityLimiter(self.size)
        return await trio.to_thread.run_sync(self._read, operation, limiter=self._limiter)

    def _read(self, operation: Callable[[Any], T]) -> T:
        with self._connection() as connection:
            connection.execute(self.begin)
            try:
                return operation(connection)
            finally:
                with contextlib.suppress(Exception):
                    connection.execute("COMMIT")

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Any]:
        with self._lock:
            connection = self._idle.pop() if self._idle else None
        if connection is None:
            connection = self.connect()
        try:
            yield connection
        except BaseException:
            if self.broken(connection):
                with contextlib.suppress(Exception):
                    connection.close()
                raise
            self._give_back(connection)
            raise
        self._give_back(connection)

    def _give_back(self, connection: Any) -> None:
        with self._lock:
            if not self._closed:
                self._idle.append(connection)
                return
        connection.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for connection in idle:
            with contextlib.suppress(Exception):
                connection.close()


__all__ = ["MAX_GROUP", "ReaderPool", "Refused", "StoreClosedError", "TransactionWriter"]
