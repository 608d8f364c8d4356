"""``dressage-proxy export`` against a real proxy's SQLite store: sessions recorded through the chat API (the
embedded engine serving weight version 7, token versions recorded), finalized, then exported by a real subprocess
while the proxy keeps the store open, in JSONL and Parquet, and read back: the same segments ``/trajectory/read``
returns, field for field (logprobs to float32 precision in Parquet), in the documented column types."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet
import pytest
import trio

from proxy.export_command import export_main, parse_since
from proxy.trajectory.parquet_schema import SCHEMA, SCHEMA_KEY, SCHEMA_VERSION, segments_of
from proxy.ui.export_file import ExportFileSource, read_export
from proxy.ui.token_text import TokenTexts
from tests.e2e.conftest import start_proxy  # noqa: F401 - the e2e suite's fixture: a proxy on its embedded engine
from tests.ui import viewer_scenario as scenario

from .exporting import as_float32, run_export

SESSIONS = ("first", "second")


async def recorded_proxy(start_proxy, store: Path, sessions=SESSIONS):  # noqa: F811
    script = [line for session in sessions for line in scenario.script(session)]
    proxy = await start_proxy(script=script, engine={"weight_version": "7"}, store=f"sqlite:///{store}",
                              record_token_versions=True)
    for session in sessions:
        await scenario.run_session(proxy, session)
    return proxy


async def read_all(proxy, sessions=SESSIONS) -> list[dict]:
    segments = []
    for session in sessions:
        answer = await proxy.post("/trajectory/read", {"session_id": session})
        segments += answer.json()["data"]
    return segments


async def test_jsonl_and_parquet_exports_hold_exactly_what_trajectory_read_returns(start_proxy, tmp_path) -> None:  # noqa: F811
    proxy = await recorded_proxy(start_proxy, tmp_path / "store.sqlite3")
    for session in SESSIONS:
        await proxy.finalize(session, reward_info={"reward": 0.5, "session": session})
    segments = await read_all(proxy)
    assert len(segments) == 6 and all(s["weight_versions"] for s in segments)
    store = f"sqlite:///{tmp_path / 'store.sqlite3'}"
    # The proxy still holds the store: the export reads beside it (read-only).
    jsonl = await run_export("--store", store, "--format", "jsonl", "--out", str(tmp_path / "out.jsonl"))
    parquet = await run_export("--store", store, "--out", str(tmp_path / "out.parquet"))  # format from the suffix
    for done in (jsonl, parquet):
        assert done.returncode == 0, done.stderr.decode()
        assert done.stdout == b"" and done.stderr == b"", "piped: quiet"

    lines = (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == segments

    table = pyarrow.parquet.read_table(tmp_path / "out.parquet")
    assert table.schema.equals(SCHEMA) and table.schema.metadata[SCHEMA_KEY] == SCHEMA_VERSION
    types = {name: table.schema.field(name).type for name in ("token_ids", "logprobs", "loss_mask", "weight_versions")}
    assert types == {"token_ids": pa.list_(pa.int32()), "logprobs": pa.list_(pa.float32()),
                     "loss_mask": pa.list_(pa.int8()), "weight_versions": pa.list_(pa.int32())}
    # The typed columns as a trainer reads them, without the decoder.
    assert table.column("token_ids").to_pylist() == [s["token_ids"] for s in segments]
    assert table.column("loss_mask").to_pylist() == [s["loss_mask"] for s in segments]
    assert table.column("weight_versions").to_pylist() == [
        [None if v is None else int(v) for v in s["weight_versions"]] for s in segments]
    assert table.column("weight_versions_text").null_count == len(segments)  # "7" fits int32: no fallback
    assert table.column("logprobs").to_pylist() == [s["logprobs"] for s in as_float32(segments)]
    # Every other field, decoded: the segments themselves, logprobs to float32 precision.
    assert segments_of(table) == as_float32(segments)
    # The viewer reads both files as the same sessions (the trie rebuilt from the segments).
    texts = TokenTexts(None)
    from_jsonl = ExportFileSource("j", read_export(tmp_path / "out.jsonl"), texts)
    from_parquet = ExportFileSource("p", read_export(tmp_path / "out.parquet"), texts)
    assert from_parquet.session_ids() == from_jsonl.session_ids() == list(SESSIONS)
    for session in SESSIONS:
        a, b = await from_jsonl.session(session), await from_parquet.session(session)
        assert scenario.tree_shape(a["trie"]) == scenario.tree_shape(b["trie"]) == scenario.expected_tree()
        assert [s["tokens"]["version"] for s in a["segments"]] == [s["tokens"]["version"] for s in b["segments"]]


async def test_since_exports_only_the_sessions_finalized_from_then_on(start_proxy, tmp_path) -> None:  # noqa: F811
    proxy = await recorded_proxy(start_proxy, tmp_path / "store.sqlite3")
    await proxy.finalize("first")
    await trio.sleep(0.01)  # the wall clock moves on between the two finalizes (written_at is wall time)
    between = time.time()
    await trio.sleep(0.01)
    await proxy.finalize("second")
    second = await read_all(proxy, ("second",))
    store = f"sqlite:///{tmp_path / 'store.sqlite3'}"
    iso = datetime.fromtimestamp(between, timezone.utc).isoformat()
    done = await run_export("--store", store, "--since", iso, "--out", str(tmp_path / "since.jsonl"))
    assert done.returncode == 0, done.stderr.decode()
    assert [json.loads(line) for line in (tmp_path / "since.jsonl").read_text().splitlines()] == second


def test_since_takes_epoch_seconds_and_iso_times_utc_without_an_offset() -> None:
    moment = datetime(2026, 11, 26, 3, 0, 0, 250000, tzinfo=timezone.utc)
    epoch = moment.timestamp()
    for text in (repr(epoch), "2026-11-26T03:00:00.25Z", "2026-11-26T03:00:00.250+00:00", "2026-11-26 03:00:00.25",
                 "2026-11-26T04:00:00.25+01:00"):
        assert parse_since(text) == epoch, text
    assert parse_since("0") == 0.0


@pytest.mark.parametrize("since", ["yesterday", "2026-13-01", "nan", ""])
def test_a_bad_since_is_a_usage_error(tmp_path, capsys, since: str) -> None:
    with pytest.raises(SystemExit) as exited:
        export_main(["--store", f"sqlite:///{tmp_path / 'none.sqlite3'}", "--since", since,
                     "--out", str(tmp_path / "x.jsonl")])
    assert exited.value.code == 2 and "--since" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
