"""Selection: which benchmark, its run and kind, which cases, and collection of its data files.

A role of the session (`session.py` keeps the hooks and delegates here): it loads the benchmark
once per process, makes one `CaseFile` per data file, and answers whether a node id is a case.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from pytest_evalbench.base.errors import ConfigError, EvalbenchError
from pytest_evalbench.base.files import NotRegularFile, bounded_problem
from pytest_evalbench.base.safe_text import terminal
from pytest_evalbench.formats.spec import SPEC_FILE, load_spec
from pytest_evalbench.kinds.protocol import AnyKind, kind_of, spec_kind
from pytest_evalbench.kinds.run import BenchmarkRun, RunSettings
from pytest_evalbench.plugin.nodes import BrokenBenchmark, CaseFile
from pytest_evalbench.plugin.options import check_files, gate_settings

RESULT_DIRS = ("runs", ".evalbench-cache", "shards")


class Selection:
    """The selected benchmark of this process: run, kind, cases and their collection."""

    def __init__(self, config: pytest.Config, settings: RunSettings, bench_dir: Path) -> None:
        self.config = config
        self.settings = settings
        self.bench_dir = bench_dir
        self._run: BenchmarkRun | None = None
        self._kind: AnyKind | None = None
        self._cases: dict[Path, list[Any]] | None = None
        self._load_warnings: list[warnings.WarningMessage] = []
        self._case_prefix = self._nodeid_prefix(config, self.bench_dir)
        self.collection_failed = False

    @staticmethod
    def _nodeid_prefix(config: pytest.Config, bench_dir: Path) -> str:
        """Node ids of the benchmark's items start with this (everything collected there is a case)."""
        try:
            return bench_dir.relative_to(config.rootpath).as_posix() + "/"
        except ValueError:
            return ""

    def is_case(self, nodeid: str) -> bool:
        return nodeid.startswith(self._case_prefix) and "::" in nodeid

    # ------------------------------------------------------------------ loading
    @property
    def run(self) -> BenchmarkRun:
        if self._run is None:
            spec = load_spec(self.bench_dir)

            def make_app(target: Any) -> Any:
                return self.config.hook.pytest_evalbench_make_target(config=self.config, target=target)

            self._run = BenchmarkRun(self.bench_dir, spec, self.settings, make_app,
                                     matchers=argument_matchers(self.config))
        return self._run

    def loaded_run(self) -> BenchmarkRun | None:
        """The run if it was loaded (an engine may be running), else None."""
        return self._run

    @property
    def kind(self) -> AnyKind:
        if self._kind is None:
            self._kind = kind_of(self.run)
        return self._kind

    def cases_for(self, path: Path) -> list[Any]:
        """The cases of one data file (every file is loaded once per process)."""
        if self._cases is None:
            self._cases = self.kind.load_items()
        for caught in self._load_warnings:
            warnings.warn_explicit(caught.message, caught.category, caught.filename, caught.lineno)
        self._load_warnings = []
        return self._cases.get(path, [])

    def case_node_ids(self) -> list[str]:
        """The node id of every case of the benchmark, selected or not (CI shards are dealt from them)."""
        out = []
        try:
            for path in self.kind.data_files():
                try:
                    prefix = path.relative_to(self.config.rootpath).as_posix()
                except ValueError:
                    continue
                out += [f"{prefix}::{case.name}" for case in self.cases_for(path)]
        except EvalbenchError:
            return []  # a benchmark that does not load is reported by collection (exit 2)
        return out

    def preflight(self) -> None:
        """What would otherwise fail after money is spent is a usage error (exit 4) before the first call."""
        try:
            check_files(self.config, self.settings, self.bench_dir)
        except EvalbenchError as exc:
            raise pytest.UsageError(terminal(str(exc))) from None  # nothing written, nothing called
        try:
            run, kind = self.run, self.kind
            with warnings.catch_warnings(record=True) as caught:  # shown in collection, where pytest reports them
                warnings.simplefilter("always")
                self._cases = kind.load_items()
            self._load_warnings = list(caught)
        except EvalbenchError:
            run = None  # a benchmark or data file that does not load is reported by collection (exit 2)
        if run is not None:
            gate = gate_settings(self.config, self.bench_dir, run.spec.gate)
            try:
                run.preflight(kind.roles, [gate.save_baseline] if gate.save_baseline else [],
                              names_targets=spec_kind(run.spec).thresholds_name_targets)
            except EvalbenchError as exc:
                raise pytest.UsageError(terminal(str(exc))) from None  # nothing ran: last_run.json stays as it was

    def scope(self, selected: int) -> str:
        """`full` when every case of the configured benchmark was selected, else `selection`
        (a node id, -k, -m, --lf, a shard, or --evalbench-target naming fewer targets than benchmark.yaml)."""
        run = self._run
        narrowed = run is not None and bool({t.id for t in run.spec.targets} - {t.id for t in run.target_configs})
        total = sum(len(cases) for cases in (self._cases or {}).values())
        return "selection" if narrowed or selected < total else "full"

    # ------------------------------------------------------------------ collection
    def ignore_collect(self, collection_path: Path) -> bool | None:
        """Never walk result and cache directories of the benchmark."""
        if collection_path.parent == self.bench_dir and collection_path.name in RESULT_DIRS:
            return True
        return None

    def collect_file(self, file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
        """The data files of the selected benchmark; benchmark.yaml stands in when they cannot load."""
        if file_path.parent != self.bench_dir:
            return None
        try:
            files = self.kind.data_files()
        except EvalbenchError as exc:
            if file_path.name == SPEC_FILE:
                return BrokenBenchmark.from_parent(parent, path=file_path, message=str(exc))
            return None
        if file_path in files:
            return CaseFile.from_parent(parent, path=file_path)
        if file_path.name == SPEC_FILE:
            missing = [f for f in files if not f.is_file()]
            if missing:
                problem = (f"file not found{self._hint(missing[0])}" if not missing[0].exists()
                           else bounded_problem(NotRegularFile()))  # a FIFO or device is never read
                return BrokenBenchmark.from_parent(parent, path=file_path, message=f"{missing[0]}: {problem}")
        return None

    def _hint(self, missing: Path) -> str:
        if missing.name == "scenarios.json":
            import shlex

            root = self.config.rootpath
            where = [] if root == self.config.invocation_params.dir else ["--root", str(root)]
            return f"; generate it with `{shlex.join(['evalbench', 'gen-scenarios', self.settings.benchmark, *where])}`"
        return ""


def argument_matchers(config: pytest.Config) -> dict[str, Any]:
    """The named argument matchers every `pytest_evalbench_argument_matchers` implementation supplies."""
    merged: dict[str, Any] = {}
    for supplied in config.hook.pytest_evalbench_argument_matchers(config=config):
        if supplied is None:
            continue
        if not isinstance(supplied, dict):
            raise ConfigError(f"pytest_evalbench_argument_matchers returned {type(supplied).__name__}; it must "
                              "return a dict of name -> callable")
        for name, matcher in supplied.items():
            if not isinstance(name, str) or not callable(matcher):
                raise ConfigError(f"pytest_evalbench_argument_matchers: {name!r} must name a callable "
                                  f"(got {type(matcher).__name__})")
            if name in merged and merged[name] is not matcher:
                raise ConfigError(f"pytest_evalbench_argument_matchers: matcher {name!r} is supplied twice")
            merged[name] = matcher
    return merged
