"""Dataset-case benchmarks: JSONL cases judged by Explain evaluators under a scoring policy.

Inside: `kind` (`DatasetKind`, the protocol of `kinds.py`), `models` (one case), `loading` (the
`dataset:` block and the JSONL files), `explain` (the nine evaluators' prompts), `tool_check`
(deterministic tool-call check), `policy` (thresholds, profiles, hard fails), `runner` (one
item), `summary` and `store` (case_results.json, agent_summary.json), `answers` (live answers
kept in answers/<agent>.jsonl and scored again). May import the shared core;
never pytest, never another kind. This `__init__` imports nothing: `kinds.py` imports `kind` when
a run is of this kind.
"""
