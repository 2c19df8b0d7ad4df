"""Scenario benchmarks: scenarios.json rows × targets × samples, simulated then judged.

Inside: `kind` (`ScenarioKind`, the protocol of `kinds.py`), `models` (rows of every file),
`loading` (scenarios.json), `simulate` (the user model talks to the target), `judge`
(present/absent), `checks` (deterministic checks), `runner` (one item), `aggregate` and `store`
(results.json and runs/<target>/). May import the shared core (spec, loading, llm, targets,
run, store, reliability, panel); never pytest, never another kind. This `__init__` imports
nothing: `kinds.py` imports `kind` when a run is of this kind.
"""
