"""Dataset-case benchmarks: JSONL cases judged by Explain evaluators under a scoring policy.

Inside: `kind` (`DatasetKind`, the protocol of `kinds/protocol.py`, with the `dataset:` block, the JSONL
files and the result files), `models` (one case), `explain` (the nine evaluators' prompts), `runner` (one
item, with the deterministic tool-call check), `policy` (thresholds, profiles, hard fails), `summary`
(case_results.json, agent_summary.json), `answers` (live answers kept in answers/<agent>.jsonl and
scored again). May import the shared parts of `kinds/` and the layers below; never pytest, never another
kind. This `__init__` imports nothing: the registry imports `kind` when a run is of this kind.
"""
