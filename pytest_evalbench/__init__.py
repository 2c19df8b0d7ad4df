"""pytest-evalbench: LLM evaluations as pytest tests (`pytest --benchmark=<name>`).

The public names are resolved on first use (PEP 562): pytest imports this package for its
plugin entry point in every run, and these names pull in what an unrelated test run should not
pay for (pydantic behind the models, the text-safety tables behind the errors).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pytest_evalbench.base import __version__

if TYPE_CHECKING:
    from pytest_evalbench.base.errors import ConfigError, EvalbenchError, InputError, LLMError, TargetError
    from pytest_evalbench.formats.spec import BenchmarkSpec, Metric, TargetConfig
    from pytest_evalbench.kinds.scenarios.models import Scenario
    from pytest_evalbench.kinds.targets import TargetReply

_LAZY = {"Scenario": ".kinds.scenarios.models", "BenchmarkSpec": ".formats.spec", "Metric": ".formats.spec",
         "TargetConfig": ".formats.spec", "TargetReply": ".kinds.targets",
         **dict.fromkeys(("ConfigError", "EvalbenchError", "InputError", "LLMError", "TargetError"), ".base.errors")}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "BenchmarkSpec",
    "ConfigError",
    "EvalbenchError",
    "InputError",
    "LLMError",
    "Metric",
    "Scenario",
    "TargetConfig",
    "TargetError",
    "TargetReply",
    "__version__",
]
