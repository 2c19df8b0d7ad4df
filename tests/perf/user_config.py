"""The speed a user sees (not part of the test suite): every target figure measured in two
configurations in this one run, printed with its target, PASS or MISS, and the machine's load.

    python tests/perf/user_config.py [--only 1 2 3 4 5 6] [--configs controlled user] [--quick]
        [--scale 1.0] [--repeat 3] [--user-venv DIR]

Configurations:

controlled  what `targets.py` measures: this interpreter (the `[dev]` environment), plugin autoload
            off (`PYTEST_DISABLE_PLUGIN_AUTOLOAD=1`, `-p pytest_evalbench.plugin`, `-p xdist.plugin`
            for `-n`), `-p no:cacheprovider -q --tb=short`, every case passing.
user        what a user runs: a fresh venv holding only `pip install -e <this repository>` (built
            under the script's temporary directory, or `--user-venv DIR`, created there when it does
            not exist and reused when it does), every installed pytest plugin autoloaded, no option
            but the run's own, a workspace holding just `pytest.ini` and `benchmarks/`, and about
            half of the cases failing (the judge finds the behaviour absent in odd-numbered rows), as
            real suites have them.

Both talk to the same endpoint (`targets.py --serve`, its own process). Figures (the sizes are the
targets'; `--scale` multiplies every row count, `--quick` is `--scale 0.02 --repeat 1`, a few minutes):

1. 1,000 rows x 7 calls, latency 1 s, concurrency 256, one process: wall / ideal <= 1.10.
2. 200 rows x 7 calls, latency 100 ms, concurrency 64, one process: wall / ideal <= 1.25 (median).
   2n: the same with `-n 2` against one process + what xdist adds to a one-test suite + 0.5 s: <= 1.
3. The same rows against an endpoint enforcing 6,000 requests/min (1 s burst, x-ratelimit-* headers,
   429 + Retry-After beyond), `-n 2`, no limit option: wall / (calls / rate) <= 1.10, and at most 5%
   of the requests answered 429.
4. A cached replay of 2,000 rows against plain pytest running 2,000 trivial parametrized tests, as
   many of them failing as the replay's (`assert` of a false value): wall / plain <= 3.0 (medians of
   `--repeat` interleaved rounds).
5. Startup: an unrelated one-test run with the plugin against without it (`-p no:evalbench` in the
   user's venv; autoload off and no `-p` in the controlled one): difference <= +0.05 s (medians of 10
   interleaved rounds).
6. Peak RSS at 100,000 items (1 turn + judge, 2 ms, concurrency 64, cache off) against pytest's
   floor, 100,000 bare `pytest.Item`s with node ids of our shape, as many failing with a message of
   our length: RSS / floor <= 1.25. A failing floor item fails as a case does, `pytest.fail(message,
   pytrace=False)`: pytest keeps the same report for it (the message, the crash line, one entry).
   pytest's terminal summary looks up each failure's teardown report by scanning every kept report
   (`TerminalReporter._get_teardown_reports`, pytest 8.0 - 9.2): the floor keeps its 200,000 quiet
   setup and teardown reports, so 50,000 failures are 10^10 comparisons, hours, where our run, which
   drops its quiet ones, scans a near-empty list. The floor's conftest replaces that lookup with one
   pass over the kept reports that indexes the teardown reports with output (none here): it prints
   the same bytes, keeps the same reports, and adds no object that lives beyond the summary, so it
   changes the floor's time, not its memory.

Walls are whole processes, start to exit. CPU and peak RSS are those of the process and the
children it waited for (`os.wait4`: an xdist run's workers included). The exit status is 0 when
every figure is met, 1 when one is missed, 2 when a measured run failed (the figure is INVALID).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from targets import TURNS, Server, bare_project, header, load, machine_cpu, plain_project, report, write_bench

REPO = Path(__file__).resolve().parents[2]
CALLS = 2 * TURNS + 1
MESSAGE = "m01 'Asks': behaviour absent. judge: never asked. last exchange: " + "x" * 240
"""A failing floor item's message, about as long as a failed case's."""
CLEARED = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTHONPATH",
           "PYTHONDONTWRITEBYTECODE", "PYTEST_DEBUG_TEMPROOT", "VIRTUAL_ENV")
"""Variables of the shell the script runs in that a user's run would not have."""


@dataclass
class Config:
    """How a measured pytest process is started in one configuration."""

    name: str
    python: str
    env: dict[str, str]
    common: tuple[str, ...]
    """Options every run of this configuration has."""
    ours: tuple[str, ...]
    """Options that load our plugin (none when it is autoloaded)."""
    without: tuple[str, ...]
    """Options for a run without our plugin."""
    xdist: tuple[str, ...]
    """Options that load xdist for `-n` (none when it is autoloaded)."""
    half_failing: bool

    def command(self, args: tuple[str, ...], plugin: bool) -> list[str]:
        return [self.python, "-m", "pytest", *self.common, *(self.ours if plugin else self.without),
                *(self.xdist if "-n" in args else ()), *args]


def controlled() -> Config:
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "",
           "OPENAI_API_KEY": "sk-perf"}
    env.pop("PYTEST_ADDOPTS", None)
    return Config("controlled", sys.executable, env, ("-p", "no:cacheprovider", "-q", "--tb=short"),
                  ("-p", "pytest_evalbench.plugin"), (), ("-p", "xdist.plugin"), half_failing=False)


def user(venv: Path) -> Config:
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"building the user's venv in {venv} (pip install -e {REPO}) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "-e", str(REPO)], check=True,
                       stdout=subprocess.DEVNULL)
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    env["OPENAI_API_KEY"] = "sk-perf"
    return Config("user", str(python), env, (), (), ("-p", "no:evalbench"), (), half_failing=True)


@dataclass
class Run:
    wall: float
    exit: int
    cpu: float
    rss_mb: float
    others: float | None
    """Cores other processes used meanwhile."""


def run(config: Config, cwd: Path, *args: str, plugin: bool = True) -> Run:
    """One pytest process: whole-process wall, exit status, CPU and peak RSS (with its waited-for
    children), what other processes used of the machine meanwhile; its output is kept on failure."""
    out = cwd.parent / f"{cwd.name}-last-run.txt"  # beside the workspace, which stays as a user has it
    machine = machine_cpu()
    start = time.perf_counter()
    with out.open("wb") as sink:
        proc = subprocess.Popen(config.command(args, plugin), cwd=cwd, env=config.env, stdout=sink,
                                stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = code = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime
    after = machine_cpu()
    others = None if machine is None or after is None else max(0.0, after - machine - cpu) / wall
    if code not in (0, 1):
        out.rename(cwd.parent / f"{cwd.name}-last-failed-run.txt")
    return Run(wall, code, cpu, usage.ru_maxrss / 1024, others)


def cores(runs: list[Run]) -> str:
    shares = [r.others for r in runs if r.others is not None]
    return f"others used {statistics.median(shares):.2f} cores" if shares else "others' CPU unknown"


@dataclass
class Figure:
    number: str
    title: str
    config: str
    bound: float
    ratio: float = math.nan
    detail: list[str] = field(default_factory=list)
    problem: str = ""
    missed: str = ""
    """A second condition of the figure that failed (the rate-limited run's 429s)."""
    scaled: bool = False

    @property
    def verdict(self) -> str:
        if self.problem or math.isnan(self.ratio):
            return "INVALID"
        return "PASS" if self.ratio <= self.bound and not self.missed else "MISS"

    def line(self) -> str:
        note = " (scaled: not the target's size)" if self.scaled else ""
        return (f"{self.number:>2} [{self.config}] {self.title}: {self.ratio:.2f} (target <= {self.bound:.2f}) "
                f"{self.verdict}{note}")

    def show(self) -> None:
        print(self.line(), flush=True)
        for text in self.detail:
            print(f"      {text}", flush=True)
        for text in (self.missed, self.problem and f"INVALID: {self.problem}"):
            if text:
                print(f"      {text}", flush=True)

    def check(self, r: Run, label: str, where: Path, *, failing: bool, requests: int | None = None,
              expected: int | None = None) -> None:
        """A run must score every row: exit 0, or 1 where cases fail; and make the requests expected."""
        allowed = (0, 1) if failing else (0,)
        if r.exit not in allowed:
            self.problem += f"{label} exited {r.exit} (its output: {where.parent / (where.name + '-last-failed-run.txt')}); "
        if expected is not None and requests != expected:
            self.problem += f"{label} made {requests} requests, expected {expected}; "


@dataclass
class Plan:
    server: Server
    root: Path
    scale: float
    repeat: int

    @property
    def scaled(self) -> bool:
        return self.scale != 1.0

    def size(self, n: int) -> int:
        return max(2, round(n * self.scale))

    def base(self, concurrency: int | None = None, cache: str = "off") -> tuple[str, ...]:
        out = ("--benchmark=perf", f"--evalbench-base-url={self.server.base_url}", f"--evalbench-cache={cache}")
        return out + ((f"--evalbench-concurrency={concurrency}",) if concurrency else ())


def live(plan: Plan, config: Config, name: str, rows: int, latency: float, turns: int = TURNS) -> Path:
    plan.server.control(reset=True, latency=latency, status=200, rate_limit=None, fail_odd=config.half_failing)
    return write_bench(plan.root / config.name / name, rows, turns)


def latency_bound(plan: Plan, config: Config) -> list[Figure]:
    rows = plan.size(1000)
    ideal = math.ceil(rows / 256) * CALLS * 1.0
    figure = Figure("1", f"{rows} rows x {CALLS} calls, 1 s, concurrency 256, one process: wall / ideal",
                    config.name, 1.10, scaled=plan.scaled)
    project = live(plan, config, "latency-1", rows, 1.0)
    r = run(config, project, *plan.base(256))
    figure.check(r, "the run", project, failing=config.half_failing, requests=plan.server.requests(),
                 expected=rows * CALLS)
    figure.ratio = r.wall / ideal
    figure.detail = [f"wall {r.wall:.2f} s, ideal {ideal:.2f} s; CPU {r.cpu:.2f} s; {cores([r])}; {load()}"]
    return [figure]


def short(plan: Plan, config: Config) -> list[Figure]:
    """Figure 2 at one process and at `-n 2`, and what xdist adds to a one-test suite, interleaved."""
    rows = plan.size(200)
    ideal = math.ceil(rows / 64) * CALLS * 0.1
    one = Figure("2", f"{rows} rows x {CALLS} calls, 100 ms, concurrency 64, one process: wall / ideal",
                 config.name, 1.25, scaled=plan.scaled)
    two = Figure("2n", "the same at -n 2: wall / (one process + xdist's own start + 0.5 s)", config.name, 1.0,
                 scaled=plan.scaled)
    project = live(plan, config, "short", rows, 0.1)
    bare = plain_project(plan.root / config.name / "one-test", 1)
    runs: dict[str, list[Run]] = {"one": [], "two": [], "bare": [], "bare_xd": []}
    for _ in range(plan.repeat):
        for side, extra in (("one", ()), ("two", ("-n", "2"))):
            plan.server.control(reset=True)
            r = run(config, project, *plan.base(64), *extra)
            (one if side == "one" else two).check(r, f"the {side} run", project, failing=config.half_failing,
                                                  requests=plan.server.requests(), expected=rows * CALLS)
            runs[side].append(r)
        runs["bare"].append(run(config, bare, plugin=False))
        runs["bare_xd"].append(run(config, bare, "-n", "2", plugin=False))
    med = {side: statistics.median(r.wall for r in rs) for side, rs in runs.items()}
    one.ratio = med["one"] / ideal
    one.detail = [f"wall {med['one']:.2f} s (median; rounds {', '.join(f'{r.wall:.2f}' for r in runs['one'])}), "
                  f"ideal {ideal:.2f} s; CPU {statistics.median(r.cpu for r in runs['one']):.2f} s; "
                  f"{cores(runs['one'])}; {load()}"]
    xdist_start = med["bare_xd"] - med["bare"]
    allowed = med["one"] + xdist_start + 0.5
    two.ratio = med["two"] / allowed
    two.detail = [f"-n 2 {med['two']:.2f} s against {med['one']:.2f} + {xdist_start:.2f} (a one-test suite: "
                  f"{med['bare_xd']:.2f} s with -n 2, {med['bare']:.2f} s without) + 0.5 = {allowed:.2f} s; "
                  f"CPU {statistics.median(r.cpu for r in runs['two']):.2f} s; {cores(runs['two'])}; {load()}"]
    return [one, two]


def rate_limited(plan: Plan, config: Config) -> list[Figure]:
    rows, rate = plan.size(200), 6000.0
    calls = rows * CALLS
    ideal = calls / (rate / 60)
    figure = Figure("3", f"{rows} rows x {CALLS} calls, endpoint limited to {rate:g}/min, -n 2: wall / "
                         "(calls / rate)", config.name, 1.10, scaled=plan.scaled)
    project = live(plan, config, "rate", rows, 0.1)
    plan.server.control(rate_limit=rate)
    r = run(config, project, *plan.base(64), "-n", "2")
    stats = plan.server.stats()
    plan.server.control(rate_limit=None)
    figure.check(r, "the run", project, failing=config.half_failing, requests=int(stats["requests"]),
                 expected=calls)
    figure.ratio = r.wall / ideal
    limited = int(stats["limited"])
    share = limited / max(1, limited + int(stats["requests"]))
    figure.detail = [f"wall {r.wall:.2f} s, ideal {ideal:.2f} s; {limited} answered 429 ({share:.1%} of the "
                     f"requests; target <= 5%); CPU {r.cpu:.2f} s; {cores([r])}; {load()}"]
    if share > 0.05:
        figure.missed = f"MISS: {share:.1%} of the requests answered 429 (target <= 5%)"
    return [figure]


def plain_failing(root: Path, tests: int, failing: bool) -> Path:
    """Plain pytest's side of a replay: `tests` trivial parametrized tests, the odd ones failing."""
    plain_project(root, tests)
    if failing:
        (root / "test_rows.py").write_text(
            f"import pytest\n\n\n@pytest.mark.parametrize('i', range({tests}))\ndef test_row(i):\n"
            "    assert i % 2 == 0\n")
    return root


def replay(plan: Plan, config: Config) -> list[Figure]:
    rows = plan.size(2000)
    mix = "half failing" if config.half_failing else "all passing"
    figure = Figure("4", f"cached replay of {rows} rows ({mix}): wall / plain pytest with as many tests",
                    config.name, 3.0, scaled=plan.scaled)
    project = live(plan, config, "replay", rows, 0.0)
    record = run(config, project, *plan.base(64, cache="on"))
    figure.check(record, "recording the cache", project, failing=config.half_failing,
                 requests=plan.server.requests(), expected=rows * CALLS)
    plain = plain_failing(plan.root / config.name / "plain", rows, config.half_failing)
    run(config, plain, plugin=False)  # both sides start with warm file caches
    sides: dict[str, list[Run]] = {"replay": [], "plain": []}
    for _ in range(plan.repeat):
        plan.server.control(reset=True)
        r = run(config, project, *plan.base(cache="replay"))
        figure.check(r, "the replay", project, failing=config.half_failing, requests=plan.server.requests(),
                     expected=0)
        sides["replay"].append(r)
        p = run(config, plain, plugin=False)
        figure.check(p, "plain pytest", plain, failing=config.half_failing)
        sides["plain"].append(p)
    wall = {side: statistics.median(r.wall for r in runs) for side, runs in sides.items()}
    figure.ratio = wall["replay"] / wall["plain"]
    rounds = ", ".join(f"{a.wall / b.wall:.2f}" for a, b in zip(sides["replay"], sides["plain"]))
    figure.detail = [f"replay {wall['replay']:.2f} s, plain pytest {wall['plain']:.2f} s (medians; each round's "
                     f"ratio: {rounds}); CPU {statistics.median(r.cpu for r in sides['replay']):.2f} s against "
                     f"{statistics.median(r.cpu for r in sides['plain']):.2f} s; 0 requests; "
                     f"{cores(sides['replay'] + sides['plain'])}; {load()}"]
    return [figure]


def startup(plan: Plan, config: Config) -> list[Figure]:
    figure = Figure("5", "an unrelated one-test run: seconds the plugin adds", config.name, 0.05)
    project = plan.root / config.name / "startup"
    project.mkdir(parents=True)
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "test_plain.py").write_text("def test_ok():\n    assert True\n")
    times: dict[bool, list[Run]] = {True: [], False: []}
    for _ in range(max(10, plan.repeat)):
        for plugin in (True, False):
            r = run(config, project, "test_plain.py", plugin=plugin)
            figure.check(r, "the one-test run", project, failing=False)
            times[plugin].append(r)
    with_plugin, without = (statistics.median(r.wall for r in times[side]) for side in (True, False))
    figure.ratio = with_plugin - without
    cpu = statistics.median(r.cpu for r in times[True]) - statistics.median(r.cpu for r in times[False])
    fastest = min(r.wall for r in times[True]) - min(r.wall for r in times[False])
    figure.detail = [f"{with_plugin * 1000:.0f} ms with the plugin, {without * 1000:.0f} ms without (medians of "
                     f"{len(times[True])} interleaved rounds; fastest runs {fastest * 1000:+.0f} ms); CPU "
                     f"{cpu * 1000:+.0f} ms (medians); {cores(times[True])}; {load()}"]
    return [figure]


FAILING_ITEMS = """

class Failing(Row):
    def runtest(self):
        pytest.fail(MESSAGE, pytrace=False)


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    with_output = None

    def teardown_reports(node_id):
        nonlocal with_output
        if with_output is None:  # one pass over the kept reports, at the first failure printed
            with_output = {}
            for report in reporter.getreports(""):
                if report.when == "teardown" and report.sections:
                    key = getattr(report, "id", report.nodeid)
                    with_output.setdefault(key, []).append(report)
        return with_output.get(node_id, [])

    reporter._get_teardown_reports = teardown_reports


def pytest_collect_file(parent, file_path):
    if file_path.name == "scenarios.json":
        return HalfRows.from_parent(parent, path=file_path)


class HalfRows(pytest.File):
    def collect(self):
        for i in range(ROWS):
            kind = Failing if i % 2 else Row
            yield kind.from_parent(self, name=f"m01_s{i:05d}_v01[t-s0]")
"""


def peak_rss(plan: Plan, config: Config) -> list[Figure]:
    items = plan.size(100_000)
    figure = Figure("6", f"peak RSS at {items} items: RSS / pytest's floor of as many bare items", config.name,
                    1.25, scaled=plan.scaled)
    floor_project = bare_project(plan.root / config.name / "bare", items)
    if config.half_failing:
        conftest = floor_project / "conftest.py"
        conftest.write_text(conftest.read_text() + FAILING_ITEMS.replace("ROWS", str(items))
                            .replace("MESSAGE", repr(MESSAGE)))
    floor = run(config, floor_project, plugin=False)
    figure.check(floor, "the floor", floor_project, failing=config.half_failing)
    project = live(plan, config, "rss", items, 0.002, turns=1)
    r = run(config, project, *plan.base(64))
    figure.check(r, "the run", project, failing=config.half_failing, requests=plan.server.requests(),
                 expected=items * 3)
    figure.ratio = r.rss_mb / floor.rss_mb
    figure.detail = [f"peak RSS {r.rss_mb:.0f} MB, floor {floor.rss_mb:.0f} MB (the whole process's peak); "
                     f"1 turn + judge, 2 ms, concurrency 64, cache off; wall {r.wall:.1f} s and "
                     f"{floor.wall:.1f} s; {load()}"]
    return [figure]


FIGURES: dict[int, Callable[[Plan, Config], list[Figure]]] = {
    1: latency_bound, 2: short, 3: rate_limited, 4: replay, 5: startup, 6: peak_rss}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", type=int, nargs="+", choices=sorted(FIGURES), default=sorted(FIGURES))
    parser.add_argument("--configs", nargs="+", choices=("controlled", "user"), default=["controlled", "user"])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every row count (default 1)")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds of figures 2 and 4 (default 3)")
    parser.add_argument("--quick", action="store_true", help="a quick check of the script: --scale 0.02 --repeat 1")
    parser.add_argument("--user-venv", type=Path, help="the user's venv (built here when missing; default: a "
                                                       "new one in the temporary directory)")
    args = parser.parse_args()
    if args.quick:
        args.scale, args.repeat = min(args.scale, 0.02), 1
    began = time.perf_counter()
    header()
    figures: list[Figure] = []
    server = Server()
    try:
        with tempfile.TemporaryDirectory(prefix="evalbench-user-") as tmp:
            root = Path(tmp)
            configs = [controlled() if name == "controlled" else user(args.user_venv or root / "venv")
                       for name in args.configs]
            plan = Plan(server, root, args.scale, max(1, args.repeat))
            for number in sorted(set(args.only)):
                for config in configs:
                    for figure in FIGURES[number](plan, config):
                        figure.show()
                        figures.append(figure)
    finally:
        server.stop()
    return report(figures, began)


if __name__ == "__main__":
    sys.exit(main())
