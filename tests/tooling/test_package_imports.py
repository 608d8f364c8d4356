"""The arrows between the system's packages point one way (issue 20, item 8; docs/architecture.md, "Layout").

- ``statemachines/`` (pure rules) imports none of the others;
- ``serving/`` (what both servers stand on: hypercorn in-process, the tokenizer files) imports none of the others;
- ``engine/`` (the SGLang stand-in, a program of its own) imports ``serving`` only: never ``proxy`` or the
  machines;
- ``proxy/`` imports ``engine`` only where it embeds the engine (runs it in-process when no SGLang URL is given).

Every ``import`` and ``from ... import`` is read from the source with ``ast``, wherever it stands (function-level and
``TYPE_CHECKING`` imports included), relative ones resolved against the module's package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("proxy", "statemachines", "engine", "serving")

#: package -> the project packages it must never import
FORBIDDEN = {
    "statemachines": {"proxy", "engine", "serving"},
    "serving": {"proxy", "engine", "statemachines"},
    "engine": {"proxy", "statemachines"},
}

#: the proxy modules that embed the engine, and why; no other proxy module may import ``engine``
EMBEDS_ENGINE = {
    "proxy/cli.py": "without --sglang-router-url the proxy starts the engine in-process and offers its flags",
    "proxy/demo.py": "the demo runs the proxy on its embedded engine, with an engine script",
}


def imported_packages(source: str, module: str, *, is_package: bool = False) -> set[str]:
    """The top-level names of every module ``source`` imports; ``module`` is its dotted name (for relative
    imports), ``is_package`` whether it is a package's ``__init__``."""
    package = module if is_package else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[: len(parts) - node.level + 1]
                found.add(base[0] if base and base[0] else "<beyond the top>")
            elif node.module:
                found.add(node.module.partition(".")[0])
    return found


def _modules(package: str) -> list[tuple[str, str, bool]]:
    """(path relative to the root, dotted module name, is a package) of every module of ``package``."""
    out = []
    for path in sorted(ROOT.joinpath(package).rglob("*.py")):
        relative = path.relative_to(ROOT)
        parts = relative.with_suffix("").parts
        is_package = path.name == "__init__.py"
        out.append((relative.as_posix(), ".".join(parts[:-1] if is_package else parts), is_package))
    return out


def _imports_of(package: str) -> dict[str, set[str]]:
    return {
        path: imported_packages(ROOT.joinpath(path).read_text(), module, is_package=is_package) & set(PACKAGES)
        for path, module, is_package in _modules(package)
    }


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_never_imports_the_packages_above_it(package: str) -> None:
    imports = _imports_of(package)
    assert imports, f"no modules found in {package}/"
    wrong = {path: sorted(found & FORBIDDEN[package]) for path, found in imports.items() if found & FORBIDDEN[package]}
    assert not wrong, f"{package}/ must not import {sorted(FORBIDDEN[package])}: {wrong}"


def test_proxy_imports_the_engine_only_where_it_embeds_it() -> None:
    importers = {path for path, found in _imports_of("proxy").items() if "engine" in found}
    assert importers <= set(EMBEDS_ENGINE), f"proxy modules importing engine: {sorted(importers - set(EMBEDS_ENGINE))}"
    # The allow-list names modules that really do embed it (a stale entry would hide nothing, but would mislead).
    assert importers == set(EMBEDS_ENGINE)


@pytest.mark.parametrize("source, module, is_package, expected", [
    ("import proxy.api", "engine.app", False, {"proxy"}),
    ("from proxy.serving import x", "engine.app", False, {"proxy"}),
    ("def f():\n    from statemachines import gate\n", "engine.app", False, {"statemachines"}),
    ("from . import config", "engine.app", False, {"engine"}),
    ("from ..parsing import x", "proxy.api.render", False, {"proxy"}),
    ("from .app import x", "engine", True, {"engine"}),
    ("from ... import x", "engine.app", False, {"<beyond the top>"}),
])
def test_the_import_reader_sees_every_form(source: str, module: str, is_package: bool, expected: set[str]) -> None:
    assert imported_packages(source, module, is_package=is_package) == expected
