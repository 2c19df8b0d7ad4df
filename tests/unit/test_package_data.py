"""The HTML report's stylesheet and script are package data: pyproject ships them, the page inlines them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest_evalbench
from pytest_evalbench.render.html import _asset

PACKAGE = Path(pytest_evalbench.__file__).parent


def test_every_data_file_of_the_package_is_in_package_data() -> None:
    """A wheel ships only what `[tool.setuptools.package-data]` names: every non-Python file of the
    package must be matched there, or an installed report page has no style and no filters."""
    pyproject = (PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8")
    found = re.search(r"^\[tool\.setuptools\.package-data\]\s*pytest_evalbench = (\[.*?\])", pyproject, re.M | re.S)
    assert found, "pyproject.toml has no package-data for pytest_evalbench"
    patterns = json.loads(found.group(1))  # a TOML array of plain strings is JSON
    data = [p.relative_to(PACKAGE) for p in PACKAGE.rglob("*")
            if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts]
    assert Path("render/report.css") in data and Path("render/report.js") in data
    assert [str(p) for p in data if not any(p.match(pattern) for pattern in patterns)] == []


def test_report_assets_are_read_from_the_package() -> None:
    css, js = _asset("report.css"), _asset("report.js")
    assert css.startswith("\nbody{") and "addEventListener" in js
