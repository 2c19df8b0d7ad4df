"""One definition of each kind of pydantic model: every model that forbids unknown keys is a
`formats.Strict` (or a `StrictAnswer`), every lenient input model an `Input`; no module spells the
configuration again."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

from pydantic import BaseModel
from syntax_trees import parse

import pytest_evalbench
from pytest_evalbench.formats import Input, Strict, StrictAnswer

PACKAGE = Path(pytest_evalbench.__file__).parent


def package_models() -> list[type[BaseModel]]:
    found = []
    for info in pkgutil.walk_packages(pytest_evalbench.__path__, "pytest_evalbench."):
        if info.name.startswith("pytest_evalbench.plugin") or info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        found += [obj for obj in vars(module).values() if inspect.isclass(obj) and issubclass(obj, BaseModel)
                  and obj.__module__ == info.name]
    return found


def test_every_strict_model_has_the_one_base() -> None:
    models = package_models()
    assert len(models) > 40
    stray = [f"{m.__module__}.{m.__qualname__}" for m in models
             if m.model_config.get("extra") == "forbid" and not issubclass(m, Strict | StrictAnswer)]
    assert stray == []
    answers = [m.__qualname__ for m in models if m.model_config.get("strict")]
    assert answers and all(issubclass(m, StrictAnswer) for m in models if m.model_config.get("strict"))


def test_no_module_spells_the_configuration_again() -> None:
    """`extra="forbid"` and `strict=True` are written in formats/__init__.py only."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).as_posix() == "formats/__init__.py":
            continue
        for node in ast.walk(parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "ConfigDict":
                for keyword in node.keywords:
                    if (keyword.arg, getattr(keyword.value, "value", None)) in {("extra", "forbid"), ("strict", True)}:
                        offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
            if isinstance(node, ast.ClassDef) and node.name in {"_Strict", "_Input", "Strict", "Input"}:
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno} class {node.name}")
    assert offenders == []


def test_input_models_keep_unknown_keys() -> None:
    lenient = [m for m in package_models() if issubclass(m, Input)]
    assert len(lenient) > 10
    assert all(m.model_config.get("extra") == "allow" for m in lenient)
