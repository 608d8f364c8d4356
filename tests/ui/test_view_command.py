"""``dressage-proxy view FILE``, a real subprocess: it serves the viewer's page and ``/ui/api/`` JSON from an exported
file (JSONL as ``/trajectory/read`` returns segments, and Parquet written here with pyarrow in the types issue 16
will write: int32 ids, float32 logprobs, int8 masks, int32 versions), prints its URL, opens a browser through
``webbrowser`` unless ``--no-open`` (``$BROWSER`` records the call), and shows the same data for both files as a
running proxy does."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pyarrow
import pyarrow.parquet
import pytest
import trio

from proxy.cli import main
from tests.e2e.conftest import start_proxy  # noqa: F401 - the e2e suite's fixture: a proxy on its embedded engine
from tests.ui import viewer_scenario as scenario

ROOT = Path(__file__).resolve().parents[2]
SESSION = "exported"
VERSION = "7"


async def exported_segments(start_proxy) -> tuple[Any, list[dict[str, Any]]]:  # noqa: F811
    """The scenario's segments as the trainer reads them, from a proxy whose engine serves weight version 7."""
    proxy = await start_proxy(script=scenario.script(SESSION), engine={"weight_version": VERSION})
    await scenario.run_session(proxy, SESSION)
    await proxy.finalize(SESSION)
    response = await proxy.post("/trajectory/read", {"session_id": SESSION})
    return proxy, response.json()["data"]


def write_jsonl(path: Path, segments: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(segment) + "\n" for segment in segments))
    return path


def write_parquet(path: Path, segments: list[dict[str, Any]]) -> Path:
    """One row per segment: the token arrays in issue 16's narrow types, the rest as pyarrow infers it."""
    def versions(segment: dict[str, Any]) -> list[int | None]:
        return [None if v is None else int(v) for step in segment["steps"] for v in step["concat_versions"]]

    narrow = {
        "token_ids": pyarrow.array([s["token_ids"] for s in segments], pyarrow.list_(pyarrow.int32())),
        "logprobs": pyarrow.array([s["logprobs"] for s in segments], pyarrow.list_(pyarrow.float32())),
        "loss_mask": pyarrow.array([s["loss_mask"] for s in segments], pyarrow.list_(pyarrow.int8())),
        "weight_versions": pyarrow.array([versions(s) for s in segments], pyarrow.list_(pyarrow.int32())),
    }
    rest = {name: pyarrow.array([s.get(name) for s in segments])
            for name in segments[0] if name not in narrow}
    pyarrow.parquet.write_table(pyarrow.table({**rest, **narrow}), path)
    return path


class ViewProcess:
    """``python -m proxy.cli view ...`` until stopped; ``url`` is the page URL it printed."""

    def __init__(self, process: trio.Process, url: str) -> None:
        self.process, self.url = process, url

    async def get(self, path: str) -> httpx.Response:
        async with httpx.AsyncClient(timeout=60) as client:
            return await client.get(self.url + path)

    async def stop(self) -> int:
        self.process.send_signal(signal.SIGINT)
        with trio.fail_after(30):
            return await self.process.wait()


async def start_view(*args: str, env: dict[str, str] | None = None) -> ViewProcess:
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "proxy.cli", "view", *args], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, env={**os.environ, **(env or {})},
    )
    printed = b""
    with trio.fail_after(60):
        while not printed.endswith(b"\n"):
            chunk = await process.stdout.receive_some(1)
            if not chunk:
                errors = await process.stderr.receive_some(65536)
                pytest.fail(f"dressage-proxy view exited before printing its URL: {errors.decode()}")
            printed += chunk
    url = printed.decode().strip()
    assert url.startswith("http://127.0.0.1:") and url.endswith("/ui/"), url
    return ViewProcess(process, url)


async def viewer_data(view: ViewProcess) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    listing = await view.get("api/sessions")
    assert listing.status_code == 200, listing.text
    detail = await view.get(f"api/sessions/{SESSION}")
    assert detail.status_code == 200, detail.text
    return listing.json()["sessions"], detail.json()


def check_against_read(detail: dict[str, Any], segments: list[dict[str, Any]], tito: Any) -> None:
    assert detail["source"]["kind"] == "file"
    assert scenario.tree_shape(detail["trie"]) == scenario.expected_tree()
    assert {node["text"]: node["boundary"]["reason"] for node in scenario.flatten(detail["trie"]) if node["boundary"]} \
        == {scenario.FIRST: "session_start", scenario.SUB_ANSWER: "new_conversation"}
    drawn = detail["segments"]
    assert [s["trajectory_id"] for s in drawn] == [s["trajectory_id"] for s in segments]
    for view, segment in zip(drawn, segments, strict=True):
        tokens = view["tokens"]
        assert tokens["ids"] == segment["token_ids"] and tokens["mask"] == segment["loss_mask"]
        assert "".join(tokens["text"]) == tito.decode(segment["token_ids"])
        for index, bit in enumerate(segment["loss_mask"]):
            if bit:  # float32 in the Parquet file: equal to float32 precision
                assert tokens["logprob"][index] == pytest.approx(segment["logprobs"][index], rel=1e-6, abs=1e-6)
        generated = {str(v) for v, g in zip(tokens["version"], tokens["generated"], strict=True) if g}
        assert generated == {VERSION}
        assert [step["start"] for step in view["steps"]] == [
            sum(len(step["concat_token_ids"]) for step in segment["steps"][:i]) for i in range(len(segment["steps"]))]


async def test_view_serves_a_jsonl_and_a_parquet_export_as_the_same_viewer_data(start_proxy, tmp_path,  # noqa: F811
                                                                               qwen3_path) -> None:
    proxy, segments = await exported_segments(start_proxy)
    assert len(segments) == 3
    jsonl = write_jsonl(tmp_path / "export.jsonl", segments)
    parquet = write_parquet(tmp_path / "export.parquet", segments)
    seen = []
    for path in (jsonl, parquet):
        view = await start_view(str(path), "--no-open", "--tokenizer-path", str(qwen3_path))
        try:
            page = await view.get("")
            assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
            assert 'id="segments"' in page.text
            script = await view.get("static/viewer.js")
            assert script.headers["content-type"] == "text/javascript; charset=utf-8"
            rows, detail = await viewer_data(view)
        finally:
            assert await view.stop() == 0
        summary = [(r["session_id"], r["state"], r["steps"], r["segments"]) for r in rows]
        assert summary == [(SESSION, "finalized", 4, 3)]
        assert rows[0]["tokens"] == sum(len(s["token_ids"]) for s in segments)
        check_against_read(detail, segments, proxy.tito)
        seen.append(detail)
    from_jsonl, from_parquet = seen
    assert scenario.tree_shape(from_jsonl["trie"]) == scenario.tree_shape(from_parquet["trie"])
    for a, b in zip(from_jsonl["segments"], from_parquet["segments"], strict=True):
        assert (a["tokens"]["ids"], a["tokens"]["text"], a["tokens"]["mask"]) == (
            b["tokens"]["ids"], b["tokens"]["text"], b["tokens"]["mask"])


async def test_view_opens_a_browser_unless_no_open(tmp_path) -> None:
    export = tmp_path / "one.jsonl"
    export.write_text(json.dumps({"trajectory_id": "s:0", "parent_traj_id": "s", "token_ids": [1, 2],
                                  "loss_mask": [0, 1], "logprobs": [0.0, -0.5], "messages": []}) + "\n")
    record = tmp_path / "opened.txt"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\necho "$1" > {record}\n')
    browser.chmod(browser.stat().st_mode | stat.S_IEXEC)
    view = await start_view(str(export), env={"BROWSER": f"{browser} %s"})
    try:
        with trio.fail_after(30):
            while not record.exists() or not record.read_text().strip():
                await trio.sleep(0.05)
        assert record.read_text().strip() == view.url
        rows = (await view.get("api/sessions")).json()["sessions"]
        assert [(r["session_id"], r["tokens"]) for r in rows] == [("s", 2)]
    finally:
        assert await view.stop() == 0
    record.unlink()
    quiet = await start_view(str(export), "--no-open", env={"BROWSER": f"{browser} %s"})
    try:
        assert (await quiet.get("api/sessions")).status_code == 200
    finally:
        assert await quiet.stop() == 0
    assert not record.exists()


@pytest.mark.parametrize(("content", "message"), [
    (None, "no such file"),
    ("{not json\n", "not a JSON object"),
    ('{"trajectory_id": "s:0"}\n', "has no token_ids"),
])
def test_view_refuses_a_file_it_cannot_read_with_a_clear_error(tmp_path, capsys, content, message) -> None:
    path = tmp_path / "bad.jsonl"
    if content is not None:
        path.write_text(content)
    assert main(["view", str(path), "--no-open"]) == 2  # through the proxy's own entry point
    errors = capsys.readouterr().err
    assert message in errors and "Traceback" not in errors
