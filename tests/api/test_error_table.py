"""One table decides every error's status (issue 14, item 12): ``proxy/api/errors.py``'s ``ERROR_TABLE``.

- docs/api.md's error table is that table, row by row;
- every place that writes a status next to a code as literals (the generation machine's ``RespondError``, its
  ``UpstreamFailed`` / ``PrepareFailed`` events, ``ApiError(...)`` calls) agrees with it;
- the session layer's and the gate's errors name codes of the table.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from proxy.api.errors import ERROR_TABLE, ErrorCode, error_table_markdown
from proxy.controllers.gate import ResumeRefusedError
from proxy.trajectory import session_errors

ROOT = Path(__file__).resolve().parents[2]
API_DOC = ROOT / "docs" / "api.md"

#: calls whose first two positional arguments are (status, code)
_STATUS_CODE_CALLS = {"RespondError", "UpstreamFailed", "PrepareFailed", "ApiError"}


def docs_error_table() -> list[str]:
    """The rows of the table under docs/api.md's "## Error codes" heading (header and separator included)."""
    text = API_DOC.read_text(encoding="utf-8")
    section = text.split("\n## Error codes\n", 1)[1].split("\n## ", 1)[0]
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| code |"))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def test_docs_api_error_table_is_the_modules_table_row_by_row() -> None:
    expected = error_table_markdown().splitlines()
    documented = docs_error_table()
    hint = "regenerate it: python -c 'from proxy.api.errors import error_table_markdown as t; print(t())'"
    assert documented[:2] == expected[:2], hint
    documented_codes = [re.match(r"\| `([a-z_]+)` \|", row).group(1) for row in documented[2:]]
    assert documented_codes == [code.value for code in ERROR_TABLE], f"rows or their order differ; {hint}"
    for row, want in zip(documented[2:], expected[2:], strict=True):
        assert row == want, f"docs/api.md row differs from ERROR_TABLE; {hint}\n docs: {row}\n code: {want}"


def _literal_status_code_pairs(path: Path) -> list[tuple[int, int, str]]:
    """(line, status, code) of every call ``Name(<int literal>, <str literal>, ...)`` of the calls above."""
    pairs = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call) or len(node.args) < 2:
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        status, code = node.args[0], node.args[1]
        if (
            name in _STATUS_CODE_CALLS and isinstance(status, ast.Constant) and isinstance(status.value, int)
            and isinstance(code, ast.Constant) and isinstance(code.value, str)
        ):
            pairs.append((node.lineno, status.value, code.value))
    return pairs


# The proxy's sources (the embedded engine, engine/, speaks SGLang's protocol, not the proxy's codes).
SOURCES = sorted([
    *ROOT.joinpath("proxy").rglob("*.py"),
    ROOT / "statemachines" / "generation_machine.py",
])


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_literal_status_next_to_a_code_is_the_tables(path: Path) -> None:
    for line, status, code in _literal_status_code_pairs(path):
        assert code in ErrorCode._value2member_map_, f"{path.name}:{line}: {code!r} is not in ERROR_TABLE"
        assert status == ERROR_TABLE[ErrorCode(code)].status, (
            f"{path.name}:{line}: {code} written as {status}; ERROR_TABLE says {ERROR_TABLE[ErrorCode(code)].status}"
        )


def test_the_generation_machine_literals_were_found() -> None:
    # The scan above is only worth something if it sees the machine's answers.
    codes = {code for _, _, code in _literal_status_code_pairs(ROOT / "statemachines" / "generation_machine.py")}
    assert {"weight_version_changed", "upstream_aborted", "paused_timeout", "session_finalized",
            "internal_error"} <= codes


def test_session_and_gate_errors_name_codes_of_the_table() -> None:
    classes = [ResumeRefusedError, *(
        value for value in vars(session_errors).values()
        if isinstance(value, type) and issubclass(value, session_errors.SessionError)
        and value is not session_errors.SessionError
    )]
    assert len(classes) >= 7
    for cls in classes:
        assert cls.code in ErrorCode._value2member_map_, cls
        assert not isinstance(cls.__dict__.get("http_status"), int), f"{cls.__name__} writes its own status"
