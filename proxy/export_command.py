"""``dressage-proxy export --store URL --format jsonl|parquet --out PATH [--since TIME]``: every stored segment to one
file, streamed batch by batch (``TrajectoryStore.segments_since``), never the whole store in memory.

- **Formats.** JSONL: one segment per line, exactly as ``POST /trajectory/read`` returns it. Parquet: one row per
  segment, one row group per batch, the schema of ``proxy/trajectory/parquet_schema.py`` (int32 token ids, float32
  logprobs, int8 loss masks, int32 versions; ``docs/storage.md``, "Reads and export"). ``--format`` defaults to
  the suffix of ``--out`` (``.parquet``/``.pq``, ``.jsonl``/``.ndjson``/``.json``). Both open in ``dressage-proxy
  view``.
- **The store is opened read-only** (``open_store(..., read_only=True)``): a SQLite file a running proxy holds is
  read beside it, nothing is migrated, leased or deleted; a store that does not exist is an error, never created.
  An export is a snapshot of what is stored, leased segments included: it does not drain.
- **``--since``**: only segments finalized at or after that time (their store ``written_at``, wall time): ISO-8601
  (``2026-11-26T03:00:00Z``; without an offset, UTC) or seconds since the epoch.
- **Progress** on a terminal (stderr is a tty): tqdm's bar with segments, tokens and their rates. Piped or
  redirected: nothing is printed unless something goes wrong.
- **All or nothing.** The file is written as ``PATH.partial-<pid>`` in the same folder, fsync'd, then renamed over
  PATH (``os.replace``, atomic), and the folder fsync'd: PATH is either the previous file or the whole export,
  never half of one. Ctrl-C, SIGTERM or an error mid-way removes the partial file; only SIGKILL (or a power cut)
  can leave one behind, under its ``.partial-<pid>`` name, and it can be deleted.
- **Exit codes**: 0 done; 1 the export failed mid-way (the store failed); 2 bad arguments, a store that cannot be
  opened, an output that cannot be written; 130 (SIGINT) or 143 (SIGTERM) interrupted. Errors are one line on
  stderr, never a traceback, never a password.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

import attrs
import trio

from proxy.trajectory.stores import StoreUrlError, open_store, parse_store_url
from proxy.trajectory.stores.crash_points import crash_point
from proxy.trajectory.stores.errors import StoreOpenError

EXIT_FAILED, EXIT_USAGE = 1, 2
FORMATS = {".parquet": "parquet", ".pq": "parquet", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl"}
DEFAULT_BATCH_SIZE = 256


class ExportError(Exception):
    """A failure the user can act on: its message is printed as is, with the exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def parse_since(text: str) -> float:
    """``--since``: seconds since the epoch, or an ISO-8601 time (UTC when it has no offset)."""
    value = text.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is neither an ISO-8601 time (2026-11-26T03:00:00Z) nor seconds since the epoch"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        return moment.timestamp()
    if not math.isfinite(seconds):
        raise argparse.ArgumentTypeError(f"{text!r} is not a time")
    return seconds


def build_export_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dressage-proxy export",
        description="Write every stored segment (or those finalized since a time) to a JSONL or Parquet file, "
        "streamed, atomically. The store is opened read-only: a running proxy may keep using it.",
    )
    parser.add_argument("--store", required=True,
                        help="the store: sqlite (the default data folder's), sqlite:///PATH or postgresql://...")
    parser.add_argument("--out", required=True, type=Path, help="the file to write (replaced only when complete)")
    parser.add_argument("--format", choices=("jsonl", "parquet"), default=None,
                        help="jsonl or parquet (default: from the suffix of --out)")
    parser.add_argument("--since", type=parse_since, default=None,
                        help="only segments finalized at or after TIME: ISO-8601 (UTC without an offset) or epoch "
                        "seconds")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE,
                        help=f"segments per read, and per Parquet row group (default {DEFAULT_BATCH_SIZE})")
    return parser


# -- the file ---------------------------------------------------------------------------------------------------------


class Sink(Protocol):
    """Where batches go: a format's writer on the partial file."""

    def write(self, segments: Sequence[dict[str, Any]]) -> None: ...

    def close(self) -> None: ...


@attrs.define(eq=False)
class JsonlSink:
    """One segment per line, as ``/trajectory/read`` returns it."""

    path: Path
    _file: Any = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._file = self.path.open("wb")

    def write(self, segments: Sequence[dict[str, Any]]) -> None:
        from proxy.trajectory.parquet_schema import json_text

        self._file.write(b"".join(json_text(segment).encode("utf-8") + b"\n" for segment in segments))

    def close(self) -> None:
        self._file.close()


@attrs.define(eq=False)
class ParquetSink:
    """One row group per batch (``proxy/trajectory/parquet_schema.py``)."""

    path: Path
    _writer: Any = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        import pyarrow.parquet  # the proxy itself never needs pyarrow

        from proxy.trajectory.parquet_schema import SCHEMA

        self._writer = pyarrow.parquet.ParquetWriter(self.path, SCHEMA, compression="zstd")

    def write(self, segments: Sequence[dict[str, Any]]) -> None:
        from proxy.trajectory.parquet_schema import table_of

        self._writer.write_table(table_of(segments))

    def close(self) -> None:
        self._writer.close()


SINKS = {"jsonl": JsonlSink, "parquet": ParquetSink}


def _fsync(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


@contextlib.contextmanager
def atomic_output(out: Path) -> Iterator[Path]:
    """The partial path to write; on success it is fsync'd and becomes ``out`` (see the module docstring); on any
    exception (a signal's cancellation included) it is removed."""
    partial = out.with_name(f"{out.name}.partial-{os.getpid()}")
    try:
        yield partial
        _fsync(partial)
        os.replace(partial, out)
        _fsync(out.parent)  # the rename itself is durable
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def check_output(out: Path) -> Path:
    """``out`` as an absolute path whose folder exists and is writable (checked before the store is opened)."""
    out = out.expanduser().absolute()
    if out.is_dir():
        raise ExportError(f"--out {out}: is a folder")
    if not out.parent.is_dir():
        raise ExportError(f"--out {out}: no such folder {out.parent}")
    if not os.access(out.parent, os.W_OK | os.X_OK):
        raise ExportError(f"--out {out}: the folder {out.parent} is not writable")
    return out


# -- progress ---------------------------------------------------------------------------------------------------------


#: columns and rows for the bar on a terminal that does not report its size
FALLBACK_SIZE = (100, 24)


def _terminal_columns() -> int:
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError):
        return 0


@attrs.define(eq=False)
class Progress:
    """tqdm's bar on stderr when it is a terminal; nothing otherwise."""

    total: int | None
    segments: int = 0
    tokens: int = 0
    _bar: Any = None

    def __attrs_post_init__(self) -> None:
        if sys.stderr.isatty():
            from tqdm import tqdm

            # A terminal that reports no size (0 x 0: some ptys, serial consoles) would hide the bar (tqdm hides
            # bars below the screen's last row): give it a size of its own.
            sized = _terminal_columns() > 0
            self._bar = tqdm(total=self.total, unit=" segments", desc="export", file=sys.stderr, mininterval=0.2,
                             dynamic_ncols=sized, ncols=None if sized else FALLBACK_SIZE[0],
                             nrows=None if sized else FALLBACK_SIZE[1])

    def update(self, segments: Sequence[dict[str, Any]]) -> None:
        tokens = sum(len(segment.get("token_ids") or ()) for segment in segments)
        self.segments += len(segments)
        self.tokens += tokens
        if self._bar is not None:
            elapsed = self._bar.format_dict.get("elapsed") or 0.0
            rate = f", {self.tokens / elapsed:,.0f} tokens/s" if elapsed > 0 else ""
            self._bar.set_postfix_str(f"{self.tokens:,} tokens{rate}", refresh=False)
            self._bar.update(len(segments))

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


# -- the export -------------------------------------------------------------------------------------------------------


@attrs.frozen
class ExportSummary:
    segments: int
    tokens: int


async def export_to(store: Any, sink: Sink, progress: Progress, *, since: float | None, batch_size: int) -> None:
    """Stream the store's segments into ``sink`` (the file I/O and Parquet encoding run on a worker thread)."""
    async for batch in store.segments_since(since=since, batch_size=batch_size):
        await trio.to_thread.run_sync(sink.write, batch)
        crash_point("export.batch.after")
        progress.update(batch)


async def run_export(args: argparse.Namespace, out: Path, form: str) -> ExportSummary:
    """Open the store read-only and write the whole export to ``out`` (atomically)."""
    try:
        parsed = parse_store_url(args.store)
    except StoreUrlError as exc:
        raise ExportError(str(exc)) from None
    if parsed.kind == "memory":
        raise ExportError("--store memory lives inside a proxy process: export from its sqlite or postgresql store")
    async with contextlib.AsyncExitStack() as stack:
        try:
            store = await stack.enter_async_context(open_store(parsed, read_only=True))
        except (StoreOpenError, OSError) as exc:
            raise ExportError(f"cannot open the store: {exc}") from None
        total = (await store.statistics()).segments if args.since is None else None
        with atomic_output(out) as partial:
            try:
                sink = SINKS[form](partial)
            except OSError as exc:
                raise ExportError(f"cannot write {out}: {exc.strerror or exc}") from None
            progress = Progress(total)
            try:
                await export_to(store, sink, progress, since=args.since, batch_size=args.batch_size)
            finally:
                progress.close()
                sink.close()
    return ExportSummary(progress.segments, progress.tokens)


async def export_until_signalled(args: argparse.Namespace, out: Path, form: str) -> ExportSummary | int:
    """:func:`run_export`, cancelled (its partial file removed) by SIGINT or SIGTERM: then 128 + the signal."""
    received: list[int] = []
    outcome: list[ExportSummary | Exception] = []
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                async for signum in signals:
                    received.append(signum)
                    nursery.cancel_scope.cancel()
                    return

            nursery.start_soon(watch)
            # Kept out of the nursery's exception group: the caller handles ExportError and store failures.
            try:
                outcome.append(await run_export(args, out, form))
            except Exception as exc:  # noqa: BLE001 - re-raised below, unwrapped
                outcome.append(exc)
            nursery.cancel_scope.cancel()
    if outcome and isinstance(outcome[0], ExportSummary):
        return outcome[0]  # complete (a signal after the rename changes nothing)
    if received:
        return 128 + received[0]
    raise outcome[0]


def say(message: str) -> None:
    """One line on stderr (a driver's multi-line message, e.g. libpq's hint, is joined into it)."""
    print(f"dressage-proxy export: {' '.join(message.split())}", file=sys.stderr, flush=True)


def export_main(argv: list[str]) -> int:
    """``dressage-proxy export ...`` (``proxy/cli.py:main`` dispatches here)."""
    parser = build_export_parser()
    args = parser.parse_args(argv)
    if args.batch_size < 1:
        parser.error("--batch-size must be at least 1")
    form = args.format or FORMATS.get(args.out.suffix.lower())
    if form is None:
        parser.error(f"--format is needed: the suffix of {args.out} says neither jsonl nor parquet")
    try:
        out = check_output(args.out)
        outcome = trio.run(export_until_signalled, args, out, form)
    except ExportError as exc:
        say(f"error: {exc}")
        return exc.exit_code
    except KeyboardInterrupt:  # before the signal receiver was installed: nothing was written
        say("interrupted")
        return 128 + signal.SIGINT
    except Exception as exc:  # noqa: BLE001 - the store failed mid-way: one line, no traceback
        say(f"error: the export failed ({type(exc).__name__}: {exc}); {args.out} was not written")
        return EXIT_FAILED
    if isinstance(outcome, int):
        say(f"interrupted: {out} was not written")
        return outcome
    if sys.stderr.isatty():
        say(f"{outcome.segments:,} segment(s), {outcome.tokens:,} tokens -> {out}")
    return 0


__all__ = ["ExportError", "ExportSummary", "atomic_output", "build_export_parser", "export_main", "export_to",
           "parse_since"]
