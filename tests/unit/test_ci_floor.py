"""CI runs the suite on the lowest pytest and pytest-xdist the project supports (issue 26, C9): the pins in
.ci/floor-constraints.txt are pyproject.toml's `>=` floors, and .ci/run installs and runs them."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_floor_pins_are_the_pyproject_floors() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()  # the dependency strings, e.g. "pytest>=8.0",
    floors = dict(re.findall(r'"(pytest|pytest-xdist)\s*>=\s*([\d.]+)"', pyproject))
    assert set(floors) == {"pytest", "pytest-xdist"}
    pins = {m["name"]: m["pin"] for line in (ROOT / ".ci" / "floor-constraints.txt").read_text().splitlines()
            if (m := re.fullmatch(r"(?P<name>[\w-]+)==(?P<pin>[\d.]+)\.\*", line.strip()))}
    assert pins == floors
    run = (ROOT / ".ci" / "run").read_text()
    assert "-c .ci/floor-constraints.txt" in run and ".venv-floor/bin/python -m pytest -n 2" in run
