"""Everything a person reads: terminal summary lines, last_run.json, the HTML report, the Markdown
summary, history.jsonl; all rendered from one `summary.RunSummary` per run.

Renders data handed to it (results, gate outcome, engine counters); computes no verdicts.
No pytest import.
"""
