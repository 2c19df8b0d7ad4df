"""The CI gate: threshold rules, baselines, paired comparisons and the exit status they imply.

Pure functions over in-memory rows (no pytest); the session calls it once, on the controller,
after the kind has written its result files. `verdict.GateVerdict` is its outcome as render/ reads it,
typed (verdict words, reason, rules, flips, baseline files, comparison). Never imports render/ or a kind.
"""
