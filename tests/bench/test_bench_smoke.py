"""The bench keeps working (issue 21): ``./dev bench``'s runner (``bench/floor_bench.py``) in its ``--smoke`` size.

The floor is captured from the embedded engine, the proxy (and the reference gateway, when the ``bench`` extra is
installed) run in front of it, and every phase of the real bench runs with a handful of requests. Nothing here
looks at a time or a CPU figure: only that every phase ran, answered without errors and produced its figures.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from array import array
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHAPES = {"ns", "s128-cumulative", "s1024-cumulative", "s128-incremental", "s1024-incremental"}
HAVE_GATEWAY = all(importlib.util.find_spec(m) is not None for m in ("fastapi", "uvicorn", "httpx"))


@pytest.fixture(scope="module")
def figures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("bench") / "figures.json"
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "floor_bench.py"), "--smoke", "--json", str(out)],
                            capture_output=True, text=True, timeout=900, cwd=ROOT, check=False)
    assert result.returncode == 0, f"the bench smoke failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert "| ns |" in result.stdout and "## Per-turn growth" in result.stdout and "## Memory" in result.stdout
    return json.loads(out.read_text())


def test_every_phase_runs_through_the_floor_and_the_proxy(figures: dict[str, Any]):
    assert set(figures["grid"]) == SHAPES
    for key, shape in figures["grid"].items():
        assert shape["errors"] == 0, key
        assert shape["per_round"]["floor"] and shape["per_round"]["proxy"], key
    growth = figures["growth"]["proxy"]
    assert growth["failures"] == 0 and len(growth["per_turn_cpu"]) == 4
    memory = figures["memory"]["proxy"]
    assert memory["failures"] == 0 and memory["tokens"] > 0 and memory["session_tokens"] > 0
    assert figures["machine"]["versions"]["trio"]


def test_the_reference_gateway_runs_the_same_load(figures: dict[str, Any]):
    if not HAVE_GATEWAY:
        pytest.skip("reference gateway not run: fastapi/uvicorn/httpx are not installed (the `bench` extra, "
                    "which ./dev setup installs with the test one)")
    for key, shape in figures["grid"].items():
        assert shape["per_round"]["gateway"], key
    assert figures["growth"]["gateway"]["failures"] == 0


def test_the_in_process_session_memory_bench_counts_every_session_and_token():
    # bench/session_memory.py at a handful of sessions (with tools, as an agent's): it runs, and its figures are the
    # sessions it built.
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "session_memory.py"), "--sessions", "4",
                             "--token-sessions", "1", "--tokens", "1500", "--tools", "2", "--json"],
                            capture_output=True, text=True, timeout=600, cwd=ROOT, check=False)
    assert result.returncode == 0, f"the memory bench failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["sessions"]["sessions"] == 4 and figures["tokens"]["sessions"] == 1
    assert figures["tokens"]["tokens_each"] >= 1000 and figures["sessions"]["bytes"] > 0


def test_the_server_floor_bench_runs_every_process_of_it():
    # bench/server_floor.py in its smoke size: the bare server, the bare server with the upstream client, the proxy
    # (and the gateway) each answer a phase without errors and get a figure.
    # Two source trees (this checkout twice): one proxy each, and their round-by-round ratio.
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "server_floor.py"), "--smoke",
                             "--trees", f"base={ROOT},this={ROOT}"],
                            capture_output=True, text=True, timeout=900, cwd=ROOT, check=False)
    assert result.returncode == 0, f"the server floor smoke failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    rows = [line for line in result.stdout.splitlines() if line.startswith("| ") and "**" in line]
    expected = {"bare", "bare+client", "proxy-base", "proxy-this"} | ({"gateway"} if HAVE_GATEWAY else set())
    assert {row.split("|")[1].strip() for row in rows} == expected
    assert "proxy-this / proxy-base, round by round:" in result.stdout


def test_source_trees_name_the_checkouts_to_compare_or_this_one_alone():
    # bench/servers.py is a script's module, not a package's: loaded from its file.
    spec = importlib.util.spec_from_file_location("bench_servers", ROOT / "bench" / "servers.py")
    assert spec is not None and spec.loader is not None
    servers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(servers)
    source_trees = servers.source_trees
    assert source_trees("") == [("this", None)]
    assert source_trees("base=/a,this=/b") == [("base", "/a"), ("this", "/b")]


def test_the_floors_non_streaming_answers_end_their_turn_with_float32_logprobs(tmp_path: Path):
    """The memory phases' sessions must go on by TITO (each turn's answer ends with ``<|im_end|>``: a turn cut
    short starts a new segment that stores its whole prompt again, spec 5.4) and carry logprobs as SGLang's are
    (float32 values, stored in 4 bytes): otherwise the bench's bytes per token measure neither."""
    answers = tmp_path / "answers.json"
    # the bench's scripts run with their folder on sys.path (as ./dev bench runs them): a process of its own
    script = ("import sys; from pathlib import Path; sys.path.insert(0, 'bench'); from fixed_upstream import capture; "
              "capture(Path(sys.argv[1]))")
    result = subprocess.run([sys.executable, "-c", script, str(answers)], capture_output=True, text=True,
                            timeout=600, cwd=ROOT, check=False)
    assert result.returncode == 0, f"the capture failed:\n{result.stderr[-3000:]}"
    captured = json.loads(answers.read_text())
    end_of_turn = 151645  # Qwen3's <|im_end|>
    for mode in ("cumulative", "incremental"):
        for key in ("ns8", "ns1024"):
            meta = json.loads(captured[mode]["generate"][key])["meta_info"]
            triples = meta["output_token_logprobs"]
            assert len(triples) == int(key[2:]) and triples[-1][1] == end_of_turn, (mode, key)
            values = [t[0] for t in triples]
            assert array("f", values).tolist() == values, (mode, key)
