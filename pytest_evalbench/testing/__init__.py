"""Test helpers shipped with the plugin: a scripted OpenAI-compatible server (stdlib only).

The names are loaded lazily so `python -m pytest_evalbench.testing.fake_server` does not import
the module twice (runpy warns when a package's __init__ already imported the module it runs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_evalbench.testing.fake_server import (
        FakeLLMServer,
        RateWindow,
        Reply,
        Responder,
        by_model,
        schema_answer,
        sequence,
    )

__all__ = ["FakeLLMServer", "RateWindow", "Reply", "Responder", "by_model", "schema_answer", "sequence"]


def __getattr__(name: str) -> Any:
    """Resolve the public names from .fake_server on first use."""
    if name in __all__:
        from pytest_evalbench.testing import fake_server

        return getattr(fake_server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
