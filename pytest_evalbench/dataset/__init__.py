"""Dataset-case benchmarks: JSONL cases judged by Explain evaluators under a scoring policy."""
