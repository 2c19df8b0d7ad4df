"""pytest-evalbench: LLM evaluations as pytest tests (`pytest --benchmark=<name>`)."""

from __future__ import annotations

from .errors import ConfigError, EvalbenchError, InputError, LLMError, TargetError
from .scenarios.models import Scenario
from .spec import BenchmarkSpec, Metric, TargetConfig
from .targets import TargetReply

__version__ = "0.1.0"

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
