"""The viewer's page ships in the package: every file under ``proxy/ui/static/`` is named by ``pyproject.toml``'s
package data (so a wheel, hence ``pip install .``, carries it), and the routes serve exactly those files."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

from proxy.ui.viewer_routes import STATIC_FILES, static_files

ROOT = Path(__file__).resolve().parents[2]


def test_every_static_file_is_package_data_and_served() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["proxy.ui"]
    static = ROOT / "proxy" / "ui" / "static"
    shipped = sorted(path.relative_to(static.parent).as_posix() for path in static.iterdir() if path.is_file())
    assert shipped and all(any(fnmatch.fnmatch(name, pattern) for pattern in patterns) for name in shipped)
    assert sorted(f"static/{name}" for name in STATIC_FILES) == shipped
    assert all(static_files().values())
