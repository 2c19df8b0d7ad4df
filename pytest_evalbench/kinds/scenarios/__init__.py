"""Scenario benchmarks: scenarios.json rows × targets × samples, simulated then judged.

Inside: `kind` (`ScenarioKind`, the protocol of `kinds/protocol.py`), `models` (rows of every file,
scenarios.json read), `runner` (one item: the simulated user talks to the target, then the audit),
`judge` (the metric's checks, then the LLM judge), `store` and `run_rows` (runs/<target>/, read and
written), `aggregate` (results.json, flakiness, pass^k), `estimate` (the calls an item would make) and
`rejudge` (`evalbench rejudge`). May import the shared parts of `kinds/` and the layers below; never
pytest, never another kind. This `__init__` imports nothing: the registry imports `kind` when a run is of
this kind.
"""
