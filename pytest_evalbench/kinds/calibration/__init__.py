"""Judge calibration: the third benchmark kind (`--evalbench-calibrate`).

Every line of `calibration.jsonl` beside benchmark.yaml is a human-labelled example and one test item
(`benchmarks/<name>/calibration.jsonl::<line>`): the benchmark's judge (or panel) judges it exactly as in
a normal run, the item passes when the judge agrees with the label, and the session writes
`calibration.json`: per metric (scenario benchmarks) or Explain eval (dataset benchmarks) n, exact
agreement, Cohen's kappa (quadratic-weighted for 1-5 scores) with a 95% interval, and the confusion
matrix. `judge: {min_kappa: ...}` then marks metrics whose judge falls short as "judge unreliable" in
later runs (`kinds/judges.py`, which the other kinds import instead of this package).

Inside: `kind` (`CalibrationKind`, the protocol of `kinds/protocol.py`). The calibration.jsonl and
calibration.json rows are the shared `kinds/labels.py`, agreement statistics `formats/agreement.py`. It
judges with the shared judges the other kinds use (`kinds/metric_judge.py`, `kinds/explain.py`'s
`run_eval`), never with another kind's code. This `__init__` imports nothing: the registry imports `kind`
when a run calibrates.
"""
