"""Benchmark authoring: `evalbench gen-metrics` and `evalbench gen-scenarios`.

An author writes a name and a description; an LLM (the benchmark's `user_model`) drafts the
metrics, then adversarial base scenarios per metric and one rewrite per demographic combination.
Every answer comes back through structured output and is validated; an unusable answer is re-asked
a bounded number of times with the problem shown. All calls go through the engine's response
cache, so an interrupted run resumes without paying again. Nothing here imports pytest.

Differences from the original pipeline, on purpose: benchmark.yaml is edited at the text level so
the author's comments and keys survive; the demographic rewrite of the persona is stored in
`persona` (the original kept the neutral one there and lost the rewrite); landmark turns are
checked against `generation.turns`.
"""

from __future__ import annotations

from pytest_evalbench.cli.authoring import AuthoringOptions, run_command

__all__ = ["AuthoringOptions", "run_command"]
