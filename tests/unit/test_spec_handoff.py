"""The xdist controller hands its workers the spec it validated (plugin/workers.py)."""

from __future__ import annotations

from pytest_evalbench.plugin.workers import SPEC_INPUT, SPEC_RUNTIME_INPUT, pack_spec, unpack_spec
from pytest_evalbench.spec import BenchmarkSpec


def test_a_worker_takes_the_controllers_spec_only_from_the_same_runtime() -> None:
    spec = BenchmarkSpec.model_validate({"name": "b", "owner": "me", "targets": [{"id": "t", "model": "m"}]})
    handed = pack_spec(spec)
    assert set(handed) == {SPEC_INPUT, SPEC_RUNTIME_INPUT}
    taken = unpack_spec(handed)
    assert taken == spec and taken is not spec and taken.model_extra == {"owner": "me"}
    # a worker on another interpreter or package version (`--tx popen//python=...`) reads the file itself
    assert unpack_spec({**handed, SPEC_RUNTIME_INPUT: "3.99.0|9.9.9|0.0.0"}) is None
    assert unpack_spec({}) is None  # the controller had no spec (the benchmark did not load)
