"""``dressage-proxy families``: the supported families as a table and as JSON, from the installed command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from proxy.families import FAMILIES

EXE = Path(sys.executable).parent / "dressage-proxy"


def run(*argv: str) -> str:
    result = subprocess.run([str(EXE), "families", *argv], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_families_json_lists_every_family_with_aliases_parsers_mode_and_verification():
    rows = {row["name"]: row for row in json.loads(run("--json"))}
    assert set(rows) >= {"qwen3", "qwen3_5", "qwen3_6", "generic"}
    assert len(rows) == len(FAMILIES)
    assert rows["qwen3"]["tool_call_parser"] == "qwen25" and rows["qwen3"]["reasoning_parser"] == "qwen3"
    assert rows["qwen3_6"]["aliases"] == ["qwen3.6", "qwen36"]
    assert rows["qwen3_6"]["tool_call_parser"] == "qwen3_coder" and rows["qwen3_6"]["mode"] == "incremental"
    assert rows["qwen3_6"]["template_sha256"] == rows["qwen3_5"]["template_sha256"]
    assert rows["generic"]["mode"] == "last_step" and rows["generic"]["tool_call_parser"] is None
    assert all(row["verified"] for row in rows.values())
    # the rendering back end: renderers for GLM-4.7 and GLM-5 (tests/families/test_renderers_backend.py), ours else
    assert rows["glm4_7"]["tito_backend"] == rows["glm5"]["tito_backend"] == "renderers"
    assert rows["glm5_1"]["tito_backend"] == rows["qwen3_6"]["tito_backend"] == "own"


def test_families_table_has_one_line_per_family_under_a_header():
    lines = run().splitlines()
    assert lines[0].split()[:2] == ["family", "aliases"]
    names = [line.split()[0] for line in lines[1:]]
    assert names == [family.name for family in FAMILIES]
    qwen36 = next(line for line in lines if line.startswith("qwen3_6 "))
    for cell in ("qwen3.6, qwen36", "qwen3_coder", "incremental", "qwen3.6"):
        assert cell in qwen36
    assert "backend" in lines[0].split()
    assert "renderers" in next(line for line in lines if line.startswith("glm5 ")).split()
