"""The CI gate: threshold rules, baselines, paired comparisons and the exit status they imply.

Pure functions over in-memory rows (no pytest); the session calls it once, on the controller,
after the kind has written its result files. `verdict.GateVerdict` holds its `GateDecision` as render/ reads it,
typed, with the verdict words, the reason and the flips. Never imports render/ or a kind.
"""
