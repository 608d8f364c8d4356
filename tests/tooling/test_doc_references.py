"""The docs name code that exists (issue 20, item 7).

Every backticked reference in ``docs/`` and the README is checked against the code:

- a file path (`` `proxy/request_end.py` ``) must exist;
- ``path.py:Name`` (or ``path.py::Name``, dotted names allowed) must resolve by import and attribute access;
- ``Class.member`` where ``Class`` is a class of this project (``proxy``, ``statemachines``, ``engine``,
  ``serving``) must name a member of one class of that name (a field, method or attribute). Names of other
  libraries are left alone.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("proxy", "statemachines", "engine", "serving")
DOCS = sorted([*ROOT.joinpath("docs").rglob("*.md"), ROOT / "README.md"])

_TICKED = re.compile(r"`([^`\n]+)`")
_PATH = re.compile(
    r"^((?:proxy|statemachines|engine|serving|tests|bench|docs)/[\w/.-]*\w)(?:(?::{1,2})([A-Za-z_][\w.]*))?$"
)
_MEMBER = re.compile(r"^([A-Z][A-Za-z0-9]+)\.([A-Za-z_]\w*)(?:\(.*\))?$")


def _project_classes() -> dict[str, list[type]]:
    """Every class defined in the project's packages, by name."""
    classes: dict[str, list[type]] = defaultdict(list)
    for package_name in PACKAGES:
        package = importlib.import_module(package_name)
        for info in pkgutil.walk_packages(package.__path__, package_name + "."):
            module = importlib.import_module(info.name)
            for name, value in vars(module).items():
                if inspect.isclass(value) and value.__module__ == module.__name__:
                    classes[name].append(value)
    return classes


def _references() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        for text in _TICKED.findall(doc.read_text()):
            found.append((str(doc.relative_to(ROOT)), text.strip()))
    return found


def _has_member(cls: type, member: str) -> bool:
    if hasattr(cls, member):
        return True
    fields = getattr(cls, "__attrs_attrs__", ())
    return any(field.name in (member, member.lstrip("_")) for field in fields) or member in getattr(
        cls, "__annotations__", {})


def _resolve_path_reference(path: str, name: str | None) -> str | None:
    """None when it resolves, else why not."""
    file = ROOT / path
    if not file.exists():
        return f"no file {path}"
    if name is None:
        return None
    if file.suffix != ".py":
        return f"{path} is not a Python module"
    module = importlib.import_module(path[:-3].replace("/", "."))
    target: object = module
    for part in name.split("."):
        if not (hasattr(target, part) or (inspect.isclass(target) and _has_member(target, part))):
            return f"{path} has no {name}"
        target = getattr(target, part, None)
    return None


def test_every_code_reference_in_the_docs_resolves() -> None:
    classes = _project_classes()
    broken = []
    for doc, text in _references():
        path = _PATH.match(text)
        if path:
            why = _resolve_path_reference(path.group(1), path.group(2))
            if why:
                broken.append(f"{doc}: `{text}`: {why}")
            continue
        member = _MEMBER.match(text)
        if member and member.group(1) in classes:
            owner, attribute = member.groups()
            if not any(_has_member(cls, attribute) for cls in classes[owner]):
                broken.append(f"{doc}: `{text}`: no class {owner} has {attribute}")
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("text, ok", [
    ("proxy/request_end.py", True), ("proxy/request_end.py:RequestEndHooks", True),
    ("proxy/request_end.py:NoSuchThing", False), ("proxy/nowhere.py", False),
])
def test_the_path_check_can_fail(text: str, ok: bool) -> None:
    path = _PATH.match(text)
    assert path is not None
    assert (_resolve_path_reference(path.group(1), path.group(2)) is None) == ok
