"""The documentation says what the code does: the options reference (docs/reference/options.md) is
`pytest --help`'s options, the files reference (docs/formats.md)'s field tables are the JSON Schemas'
fields, required keys, enum values and defaults, every page under docs/ is in mkdocs.yml's nav (and
every nav entry exists), and every file of the repository the docs name exists."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_evalbench.cli import schemas

ROOT = Path(__file__).parents[2]
DOCS = ROOT / "docs"
OPTIONS = DOCS / "reference" / "options.md"
OPTIONS_TABLE = "## pytest options"
FORMATS = DOCS / "formats.md"
OPTION = re.compile(r"--evalbench-[a-z][a-z-]*[a-z]")


def table_after(text: str, heading: str) -> list[list[str]]:
    """The rows (cells, stripped) of the first Markdown table after the line starting with `heading`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    rows: list[list[str]] = []
    for line in lines[start + 1:]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if not set("".join(cells)) <= set("-: "):
            rows.append(cells)
    return rows[1:]  # without the header row


@pytest.fixture(scope="module")
def help_text() -> str:
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTEST_ADDOPTS": ""}
    # --noconftest: the options are the plugin's; the suite's conftest would only add its start-up cost
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "pytest_evalbench.plugin", "--noconftest", "--help"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120, check=True)
    return done.stdout


def test_option_table_is_pytest_help(help_text: str) -> None:
    """Every `--evalbench-*` option of `pytest --help` has exactly one row of its own in the options reference."""
    rows = table_after(OPTIONS.read_text(encoding="utf-8"), OPTIONS_TABLE)
    documented = Counter(name for cells in rows for name in dict.fromkeys(OPTION.findall(cells[0])))
    offered = set(OPTION.findall(help_text))
    assert offered, "pytest --help lists no --evalbench-* option: is the plugin loaded?"
    shared = [cells[0] for cells in rows if len(set(OPTION.findall(cells[0]))) > 1]
    assert shared == [], "rows documenting more than one option"
    assert {n: c for n, c in documented.items() if c > 1} == {}, "options documented in more than one row"
    assert sorted(offered - set(documented)) == [], "options missing from the options reference"
    assert sorted(set(documented) - offered) == [], "the options reference documents options pytest does not have"


def test_option_table_names_every_choice(help_text: str) -> None:
    """An option with a fixed set of values names them all in its row (`--evalbench-cache=on|off|...`)."""
    rows = {name: cells[0] for cells in table_after(OPTIONS.read_text(encoding="utf-8"), OPTIONS_TABLE)
            for name in OPTION.findall(cells[0])}
    flat = " ".join(help_text.split())
    for name, choices in re.findall(r"(--evalbench-[a-z-]+)=?\{([a-z0-9,]+)\}", flat):
        for choice in choices.split(","):
            assert re.search(rf"\b{choice}\b", rows[name]), f"{name}: value {choice!r} not in its row"


# --------------------------------------------------------------------------- docs/formats.md


def field_table(heading: str) -> dict[str, tuple[str, str, str]]:
    """The `| field | required / default | values | meaning |` table under a formats.md heading:
    field -> (required/default, values, meaning). A field listed twice fails the test."""
    text = FORMATS.read_text(encoding="utf-8")
    rows = table_after(text, heading)
    names = [cells[0].strip("`") for cells in rows]
    twice = sorted(n for n, c in Counter(names).items() if c > 1)
    assert twice == [], f"{heading}: documented more than once: {twice}"
    return {cells[0].strip("`"): (cells[1], cells[2], cells[3]) for cells in rows}


def resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """`node` with `$ref`s and `anyOf: [X, null]` unwrapped (a nullable field is documented as X)."""
    while True:
        if "$ref" in node:
            node = schema["$defs"][node["$ref"].rsplit("/", 1)[1]]
        elif "anyOf" in node and len(node["anyOf"]) == 2 and {"type": "null"} in node["anyOf"]:
            node = next(n for n in node["anyOf"] if n != {"type": "null"})
        else:
            return node


def schema_fields(schema: dict[str, Any], node: dict[str, Any], prefix: str = "",
                  descend: tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
    """Dotted field -> {required, default, enum} of an object schema; objects named in `descend`
    (dotted) are listed field by field, others as one field. A list of objects is `field[].sub`."""
    node = resolve(schema, node)
    required = set(node.get("required", ()))
    found: dict[str, dict[str, Any]] = {}
    for name, sub in node.get("properties", {}).items():
        key = f"{prefix}{name}"
        inner = resolve(schema, sub)
        entry = {"required": name in required, "default": sub.get("default", inner.get("default")),
                 "enum": inner.get("enum") or ([inner["const"]] if "const" in inner else None)}
        items = resolve(schema, inner.get("items", {})) if inner.get("type") == "array" else None
        if items is not None and items.get("enum"):
            entry["enum"] = items["enum"]
        found[key] = entry
        if key in descend:
            found.pop(key)
            found.update(schema_fields(schema, inner, key + ".", descend))
        elif f"{key}[]" in descend and items is not None:
            found.pop(key)
            found[f"{key}[]"] = entry
            found.update(schema_fields(schema, items, key + "[].", descend))
    return found


def check_table(heading: str, fields: dict[str, dict[str, Any]]) -> None:
    """Every field documented once; required ones say `required`, others their default; every enum value named."""
    table = field_table(heading)
    assert sorted(set(fields) - set(table)) == [], f"{heading}: fields missing from docs/formats.md"
    assert sorted(set(table) - set(fields)) == [], f"{heading}: docs/formats.md documents fields the schema lacks"
    for name, info in fields.items():
        status, values, _meaning = table[name]
        if info["required"]:
            assert status == "required", f"{heading}: `{name}` is required; the table says {status!r}"
        else:
            assert status != "required", f"{heading}: `{name}` is optional; the table says required"
            default = info["default"]
            if default not in (None, [], {}, ""):
                shown = json.dumps(default) if not isinstance(default, str) else default
                assert shown in status, f"{heading}: `{name}` defaults to {shown}; the table says {status!r}"
        for value in info["enum"] or ():
            assert f"`{value}`" in values, f"{heading}: `{name}` value {value!r} is not named in the table"


BENCHMARK_OBJECTS = ("scenario", "metrics[]", "metrics[].checks", "metrics[].checks.rules[]", "metrics[].source",
                     "generation", "targets[]", "user_model", "evaluator_model", "judge",
                     "thresholds", "gate", "dataset", "dataset.policy", "dataset.policy.hard_fail")


def test_benchmark_yaml_table_is_the_schema() -> None:
    schema = schemas.load("benchmark")
    check_table("### benchmark.yaml", schema_fields(schema, schema, descend=BENCHMARK_OBJECTS))


def test_scenarios_table_is_the_schema() -> None:
    schema = schemas.load("scenarios")
    check_table("### scenarios.json", schema_fields(schema, schema["items"], descend=("landmarks[]",)))


def test_dataset_case_table_is_the_schema() -> None:
    schema = schemas.load("cases")
    check_table("### Dataset cases (JSONL)", schema_fields(schema, schema))


def test_field_tables_fail_on_a_missing_or_doubled_row(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The check above can fail: a table without `threshold_profile`, or with a row twice, is caught."""
    text = FORMATS.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `threshold_profile` |"))
    for broken in (text.replace(row + "\n", ""), text.replace(row + "\n", row + "\n" + row + "\n")):
        (tmp_path / "formats.md").write_text(broken, encoding="utf-8")
        monkeypatch.setattr(sys.modules[__name__], "FORMATS", tmp_path / "formats.md")
        with pytest.raises(AssertionError, match="threshold_profile"):
            test_dataset_case_table_is_the_schema()


OUTPUT_SECTIONS = {"results": "### results.json", "conversations": "### runs/&lt;target&gt;/conversations.json",
                   "scores": "### runs/&lt;target&gt;/conversations.json", "cost": "### cost.json",
                   "case_results": "### case_results.json", "agent_summary": "### case_results.json",
                   "calibration": "### calibration.json", "rejudge": "### runs/&lt;target&gt;/rejudge.json"}


def section(heading: str) -> str:
    text = FORMATS.read_text(encoding="utf-8")
    start = text.index(heading)
    ends = [i for i in (text.find("\n### ", start + 1), text.find("\n## ", start + 1)) if i > 0]
    return text[start:min(ends) if ends else len(text)]


@pytest.mark.parametrize("name", sorted(OUTPUT_SECTIONS))
def test_result_file_sections_name_every_field_and_value(name: str) -> None:
    """Every field of a written file's rows, and every value of its enums, is named in its section
    (conversations.json rows are the scenario row, documented above, plus their own fields)."""
    schema = schemas.load(name)
    row = resolve(schema, schema.get("items") or schema.get("additionalProperties") or schema)
    fields = schema_fields(schema, row)
    if name == "conversations":
        scenario = schemas.load("scenarios")
        fields = {k: v for k, v in fields.items() if k not in schema_fields(scenario, scenario["items"])}
    text = section(OUTPUT_SECTIONS[name])
    assert sorted(f for f in fields if f"`{f}`" not in text) == [], f"{name}: fields not in docs/formats.md"
    unnamed = sorted(f"{f}={v}" for f, info in fields.items() for v in info["enum"] or ()
                     if f"`{json.dumps(v) if not isinstance(v, str) else v}`" not in text)
    assert unnamed == [], f"{name}: values not in docs/formats.md"


# --------------------------------------------------------------------------- the site's nav


def nav_pages(nav: Any) -> list[str]:
    """Every page (a path under docs/) that mkdocs.yml's `nav` names, in order, nested sections included."""
    if isinstance(nav, str):
        return [] if "://" in nav else [nav]
    if isinstance(nav, list):
        return [page for entry in nav for page in nav_pages(entry)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in nav_pages(value)]
    raise AssertionError(f"unexpected nav entry {nav!r}")


def check_nav(config: Path, docs: Path) -> None:
    """Every Markdown page under `docs` is in the nav exactly once, and every nav entry is a page there."""
    pages = nav_pages(yaml.safe_load(config.read_text(encoding="utf-8"))["nav"])
    on_disk = {path.relative_to(docs).as_posix() for path in docs.rglob("*.md")}
    twice = sorted(page for page, count in Counter(pages).items() if count > 1)
    assert twice == [], f"pages in the nav more than once: {twice}"
    assert sorted(on_disk - set(pages)) == [], "pages under docs/ missing from mkdocs.yml's nav"
    assert sorted(set(pages) - on_disk) == [], "nav entries of mkdocs.yml with no page under docs/"


def test_every_page_is_in_the_nav_and_every_nav_entry_exists() -> None:
    check_nav(ROOT / "mkdocs.yml", DOCS)


def test_nav_check_fails_on_a_missing_page_or_entry(tmp_path: Path) -> None:
    """The check above can fail: a page the nav leaves out, and a nav entry without its page."""
    (tmp_path / "docs" / "guides").mkdir(parents=True)
    for page in ("index.md", "guides/a.md"):
        (tmp_path / "docs" / page).write_text("# page\n", encoding="utf-8")
    config = tmp_path / "mkdocs.yml"
    config.write_text("nav:\n  - Home: index.md\n  - Guides:\n      - A: guides/a.md\n", encoding="utf-8")
    check_nav(config, tmp_path / "docs")
    (tmp_path / "docs" / "guides" / "b.md").write_text("# b\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="missing from mkdocs"):
        check_nav(config, tmp_path / "docs")
    config.write_text("nav:\n  - index.md\n  - guides/a.md\n  - guides/b.md\n  - guides/c.md\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="no page under docs"):
        check_nav(config, tmp_path / "docs")


# --------------------------------------------------------------------------- files the docs name

CITED = re.compile(r"`((?:tests|pytest_evalbench|benchmarks|\.ci)/[\w./-]*\w)`")


@pytest.mark.parametrize("page", ["README.md", "SECURITY.md", "CHANGELOG.md",
                                  *sorted(p.relative_to(ROOT).as_posix() for p in DOCS.rglob("*.md"))])
def test_every_file_the_docs_name_exists(page: str) -> None:
    """A path such as `tests/unit/test_redaction.py` or `pytest_evalbench/base/safe_text.py` named in the
    documentation is a file or directory of the repository (written paths like `benchmarks/demo/report.html`
    aside: they exist only after a run)."""
    text = (ROOT / page).read_text(encoding="utf-8")
    written = ("results.json", "report.html", "runs", "shards", "last_run.json", "history.jsonl", "baseline.json",
               "cost.json", "calibration.json", "case_results.json", "agent_summary.json", ".sessions.json")
    cited = {path for path in CITED.findall(text) if "<" not in path and "NAME" not in path and "*" not in path
             and not any(part in written for part in Path(path).parts)}
    assert sorted(path for path in cited if not (ROOT / path).exists()) == [], f"{page} names files that do not exist"


def test_the_dataset_guide_says_which_fields_each_eval_needs() -> None:
    from pytest_evalbench.kinds.dataset.models import ROW_FIELD
    from pytest_evalbench.kinds.explain import PAYLOAD_KEYS

    text = (Path(__file__).parents[2] / "docs/guides/dataset-benchmarks.md").read_text()
    for name, keys in PAYLOAD_KEYS.items():
        assert f"| `{name}` | " + ", ".join(f"`{ROW_FIELD[k]}`" for k in keys) + " |" in text, name


def test_the_map_of_tests_names_every_unit_test_file_and_module() -> None:
    """development.md's map from modules to tests: every test file it names exists, every unit test file
    is in it, and every module or folder it names is in the package."""
    text = (DOCS / "development.md").read_text(encoding="utf-8")
    section = text.split("## Where the tests are", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`(?:integration/)?(test_[a-z_]+)`", section))
    files = {p.stem for p in (ROOT / "tests").rglob("test_*.py")}
    assert sorted(named - files) == []
    assert sorted({p.stem for p in (ROOT / "tests" / "unit").glob("test_*.py")} - named) == []
    modules = re.findall(r"`((?:base|formats|llm|kinds|gate|render|plugin|cli|testing)/[a-z_/]*(?:\.py)?)`", section)
    assert len(modules) > 30
    assert [m for m in modules if not (ROOT / "pytest_evalbench" / m).exists()] == []


def test_every_docs_page_the_package_names_exists() -> None:
    """A page the package points its users to (a comment `evalbench init` writes, an error's hint) is a
    page of the docs."""
    named = {(path.relative_to(ROOT).as_posix(), page)
             for path in (ROOT / "pytest_evalbench").rglob("*.py")
             for page in re.findall(r"\bdocs/[\w/.-]+?\.md\b", path.read_text(encoding="utf-8"))}
    assert named, "the package names no docs page: the pattern is stale"
    missing = sorted((where, page) for where, page in named if not (ROOT / page).is_file())
    assert not missing, missing


PRINTS_INTO_EVERY_RUN = {"pytest-benchmark"}
"""pytest plugins whose report header shows in every pytest run of the venv they are installed in."""


def _extra_requirements(extras: set[str]) -> set[str]:
    """The distribution names an install of `.[extras]` adds (the installed package's metadata, read
    from pyproject.toml), the extras' own extras followed."""
    from importlib.metadata import requires

    names, todo, seen = set(), list(extras), set()
    while todo:
        extra = todo.pop()
        seen.add(extra)
        for requirement in requires("pytest-evalbench") or []:
            if not re.search(rf"""extra == ["']{re.escape(extra)}["']""", requirement):
                continue
            name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower()
            inner = re.match(r"pytest-evalbench\[([\w,-]+)\]", requirement)
            if inner:
                todo += [e for e in inner.group(1).split(",") if e not in seen]
            else:
                names.add(name)
    return names


@pytest.mark.parametrize("page", ["README.md", "docs/index.md", "docs/guides/getting-started.md"])
def test_the_first_command_installs_nothing_that_prints_into_a_users_runs(page: str) -> None:
    """The install a reader evaluates in (the quick start's first command) holds the plugin and what
    the demo needs; development tools that print into every pytest run go elsewhere."""
    first = next(line for line in (ROOT / page).read_text().splitlines() if "--benchmark=demo" in line)
    install = re.search(r"pip install -e (\S+)", first)
    assert install, first
    extras = re.search(r"\[([\w,-]+)\]", install.group(1))
    added = _extra_requirements(set(extras.group(1).split(",")) if extras else set())
    assert not added & PRINTS_INTO_EVERY_RUN, (page, first)
