"""Everything a person reads: terminal summary lines, last_run.json, the HTML report, the Markdown
summary, history.jsonl; all rendered from one `summary.RunSummary` per run.

Renders data handed to it (results, the gate's typed `GateVerdict`, engine counters); computes no
verdicts and parses no gate wording back.
No pytest import.
"""
