"""Names vulture cannot see used, each reviewed (vulture reads this file with the package: `vulture`).

Fields of the documented file formats: written to the result files and read by people and other tools,
never by the package itself."""

from types import SimpleNamespace

_ = SimpleNamespace()
_.n_positive, _.n_negative  # results.json
_.contributor, _.seed_scenarios  # benchmark.yaml (impactbench's keys, kept)
_.cached_replays_counted  # cost.json
_.difficulty, _.quality_band, _.topic_family, _.learner_level  # a dataset case (eval-dataset-schema.md)
_.reference_answer, _.available_tools, _.expected_contract  # a dataset case (eval-dataset-schema.md)
_.argument_mismatches  # the tool check's result, shown through its summary
_.answer_source  # case_results.json
_.seed_title  # scenarios.json (impactbench's key, kept)
# Parameters whose names pytest-xdist's hook and scheduler protocols fix
_.crashitem, _.sched, _.duration
# A Protocol method's parameter (render.progress.LineWriter)
_.erase
# RE2 reads its option (formats.checks.check_regex): errors are raised, not logged
_.log_errors
# conversations.json: an OpenTelemetry span's fields (kinds/tools.py)
_.parent_id, _.start_ms, _.duration_ms
# opentelemetry-sdk's SpanProcessor protocol (called by the SDK, parent_context by keyword)
_.on_start, _.on_end, _.parent_context
# calibration.json fields written by the calibration kind and read by people and tools
_.judge_agreement
# The run store's revisions, oldest first: read by the tests of its migrations
_.known_revisions
