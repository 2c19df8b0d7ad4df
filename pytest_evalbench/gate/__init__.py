"""The CI gate: threshold rules, baselines, paired comparisons and the exit status they imply.

Pure functions over in-memory rows (no pytest); the session calls it once, on the controller,
after the kind has written its result files. May import `spec`, `loading`, `store`, `llm.cache`
(atomic writes) and `render` for the report; never a kind.
"""
