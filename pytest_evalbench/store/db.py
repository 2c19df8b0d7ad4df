"""Opening a store (its tables migrated to this version's revision), writing a run in one transaction and
reading runs back. The one place that talks to the database; everything above it sees `RunData`.

A store is named by an SQLAlchemy URL (`sqlite:///.evalbench/runs.sqlite`,
`postgresql+psycopg://user:password@host/db`); the URL is never shown with its password or query
(`masked_url`). A newer plugin upgrades an older store on open; an older plugin refuses a store whose
revision it does not know (`StoreError`, one line).

A store is outside input too (a shared PostgreSQL database, an SQLite file anyone may edit): every value
read back crosses the package's boundary. JSON columns are decoded by `base.json_input.parse_json` (its
bounds: no duplicate key, finite numbers within 64 bits, at most MAX_DEPTH levels) after a size bound,
and every column of a run or case is checked for its type and range (`check_run`, `check_case`): a row
that fails is one `StoreError` naming the store, the run and the case, never a traceback and never a
value silently read as another (a `passed` of 7 is not True).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Protocol, TypeVar

import orjson
from sqlalchemy import Engine, Integer, Text, and_, cast, create_engine, desc, func, insert, or_, select, text, type_coerce
from sqlalchemy.engine import Connection, Row, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from pytest_evalbench.base.errors import EvalbenchError, InputError
from pytest_evalbench.base.json_input import parse_json
from pytest_evalbench.base.numbers import MAX_INT
from pytest_evalbench.base.safe_text import SECRETS, redact
from pytest_evalbench.store import schema


class _CaseRow(Protocol):
    """A case the view read: its columns as attributes."""

    @property
    def id(self) -> int: ...

    @property
    def run_id(self) -> int: ...


class _RunRow(Protocol):
    """A run the view read."""

    @property
    def id(self) -> int: ...


RunT = TypeVar("RunT", bound=_RunRow)
CaseT = TypeVar("CaseT", bound=_CaseRow)

MIGRATIONS = Path(__file__).parent / "migrations"
HEAD = "0002"
"""This version's newest revision (`migrations/versions/`): a store at it opens without importing Alembic."""
INSERT_ROWS = 500
"""Cases per INSERT statement when a run is recorded."""
SQLITE_WAIT_S = 60.0
"""How long an SQLite writer waits for another process's transaction before giving up."""
MAX_STORED_JSON = 64 << 20
"""The most characters of one JSON value read back (a transcript; a run's targets and identities)."""
MAX_STORED_TEXT = 1 << 20
"""The most characters of a run's reason or a case's justification read back."""
MAX_STORED_NAME = 10_000
"""The most characters of a name read back (benchmark, branch, node id, target, metric...)."""


class StoreError(EvalbenchError):
    """The store cannot be opened, read or written; the message is one line without credentials."""


@dataclass
class ItemData:
    """One case of a run (the `cases` table's row without its keys)."""

    node_id: str
    target: str
    metric: str
    unit: str
    """The row's id in its data file (a scenario id, a dataset case id)."""
    sample: int
    status: str
    """The documented status: passed, failed, unscored, error, not run."""
    passed: Optional[bool] = None
    present: Optional[bool] = None
    probability: Optional[float] = None
    agreement: Optional[float] = None
    """The share of a judge panel's (or the judge samples') votes equal to the verdict, where several voted."""
    decided_by: Optional[str] = None
    justification: str = ""
    transcript: Optional[list[Any]] = None
    """The conversation's messages (`formats.results.Message` as JSON), or a dataset case's row."""

    @property
    def key(self) -> str:
        """The pass/fail unit's key (`PassFailUnit.key`): the same case in two runs."""
        return f"{self.target}|{self.unit}|{self.metric}|{self.sample}"


@dataclass
class RunData:
    """One run as the store keeps it; `id` is set once stored. `cases` is empty when a listing read it."""

    benchmark: str
    kind: str
    created: str
    commit: Optional[str]
    branch: Optional[str]
    base_branch: Optional[str]
    plugin_version: str
    targets: dict[str, Any]
    judge: Optional[str]
    verdict: str
    exit_status: int
    reason: str
    cost: float
    scope: str
    identities: dict[str, Any] = field(default_factory=dict)
    case_count: int = 0
    cases: list[ItemData] = field(default_factory=list)
    id: Optional[int] = None


_RUN_FIELDS = ("benchmark", "kind", "created", "commit", "branch", "base_branch", "plugin_version", "targets",
               "judge", "identities", "verdict", "exit_status", "reason", "cost", "scope", "case_count")
_CASE_FIELDS = ("node_id", "target", "metric", "unit", "sample", "status", "passed", "present", "probability",
                "agreement", "decided_by", "justification", "transcript")


def masked_url(url: str) -> str:
    """The store's URL as output may show it: no password, no query (it may carry one)."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return "<a store URL that is not an SQLAlchemy URL>"
    shown = parsed.set(query={}).render_as_string(hide_password=True)
    return redact(shown)


def _problem(exc: BaseException) -> str:
    """A database error as one line without its SQL or parameters (they may hold transcripts)."""
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip().splitlines()
    return redact(" ".join(text[:1]) or type(exc).__name__)[:300]


class Store:
    """An open store. Each `record` is one transaction; reads see committed runs only."""

    def __init__(self, engine: Engine, url: str) -> None:
        self.engine = engine
        self.url = masked_url(url)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        try:
            yield
        except SQLAlchemyError as exc:
            raise StoreError(f"the run store {self.url} could not be {doing}: {_problem(exc)}") from None

    def record(self, run: RunData, cases: Sequence[ItemData] | None = None) -> int:
        """Write the run and its cases (`cases`, else `run.cases`) in one transaction; the run's new id.
        The cases go `INSERT_ROWS` at a time, and a `cases` sequence that builds each case when read
        (`record.ItemRows`) is read that way too: a run of 100,000 cases never holds all of them, their
        transcripts and their insert parameters at once."""
        rows = run.cases if cases is None else cases
        values = {name: getattr(run, name) for name in _RUN_FIELDS}
        values["case_count"] = len(rows)
        with self._errors("written"), self.engine.begin() as conn:
            run_id = int(conn.execute(insert(schema.runs).values(**values).returning(schema.runs.c.id)).scalar_one())
            for start in range(0, len(rows), INSERT_ROWS):
                conn.execute(insert(schema.cases), [{"run_id": run_id, **{n: getattr(c, n) for n in _CASE_FIELDS}}
                                               for c in rows[start:start + INSERT_ROWS]])
        run.id = run_id
        return run_id

    def runs(self, benchmark: str | None = None, *, branch: str | None = None,
             limit: int | None = None) -> list[RunData]:
        """Runs (without their cases), newest first; of one benchmark and branch when given."""
        with self._errors("read"), self.engine.connect() as conn:
            return [_run_data(row, self.url) for row in newest_runs(conn, benchmark, branch=branch, limit=limit)]

    def run(self, run_id: int) -> RunData | None:
        """One run with its cases (in the order recorded), or None when the store has no such run."""
        with self._errors("read"), self.engine.connect() as conn:
            row = run_row(conn, run_id)
            if row is None:
                return None
            run = _run_data(row, self.url)
            check_cases(conn, [run_id], self.url, whole=True)
            found = conn.execute(select(schema.cases.c.id, *[_raw(schema.cases.c[n]) for n in _CASE_FIELDS])
                                 .where(schema.cases.c.run_id == run_id).order_by(schema.cases.c.id))
            run.cases = [ItemData(**check_case(run_id, c[0], dict(zip(_CASE_FIELDS, c[1:])), self.url)) for c in found]
        return run

    def benchmarks(self) -> list[str]:
        """The benchmarks with a run in the store, by name."""
        with self._errors("read"), self.engine.connect() as conn:
            col = schema.runs.c
            found = conn.execute(select(col.benchmark, func.min(col.id)).group_by(col.benchmark)
                                 .order_by(col.benchmark)).all()
        return [check_run(run_id, {"benchmark": name}, self.url)["benchmark"] for name, run_id in found]

    def count(self) -> int:
        """How many runs the store holds."""
        with self._errors("read"), self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(schema.runs)).scalar_one())


def newest_runs(conn: Connection, benchmark: str | None = None, *, branch: str | None = None,
                limit: int | None = None) -> list[Row[Any]]:
    """The `runs` rows (unchecked), newest first; of one benchmark and branch when given."""
    query = select(schema.runs).order_by(desc(schema.runs.c.created), desc(schema.runs.c.id))
    if benchmark is not None:
        query = query.where(schema.runs.c.benchmark == benchmark)
    if branch is not None:
        query = query.where(schema.runs.c.branch == branch)
    if limit is not None:
        query = query.limit(limit)
    return list(conn.execute(query))


def run_row(conn: Connection, run_id: int) -> Row[Any] | None:
    """One run's `runs` row (unchecked), or None when the store has no such run."""
    return conn.execute(select(schema.runs).where(schema.runs.c.id == run_id)).first()


def _run_data(row: Any, store: str) -> RunData:
    """A `runs` row (Core: its columns by name) as a `RunData` without cases, checked (`check_run`)."""
    data = RunData(**check_run(row.id, {name: getattr(row, name) for name in _RUN_FIELDS}, store))
    data.id = row.id
    return data


def _raw(column: Any) -> Any:
    """A column as the database holds it: a boolean as its integer (SQLAlchemy would read 7 as True)."""
    return type_coerce(column, Integer).label(column.key) if column.key in ("passed", "present") else column


_COLUMN = Path("column")
"""What `parse_json` names in its error (the check of the row names the run, the case and the field)."""


class Unreadable:
    """What a JSON column holds that the boundary refused (too long, bad JSON, a duplicate key...): a
    marker in place of the value, so that the check of its row names the run and the case."""

    __slots__ = ("problem",)

    def __init__(self, problem: str) -> None:
        self.problem = problem

    def __repr__(self) -> str:
        return f"<unreadable: {self.problem}>"


def load_json(text: str | bytes) -> Any:
    """A JSON column's text as data, through the one JSON reader; `Unreadable` when it is not JSON
    the boundary lets in (the engine's `json_deserializer`: it never raises)."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "replace")
    if len(text) > MAX_STORED_JSON:
        return Unreadable(f"{len(text):,} characters of JSON, more than the {MAX_STORED_JSON:,} a stored value may hold")
    try:
        return parse_json(text, _COLUMN)
    except InputError as exc:
        return Unreadable(exc.message + (f" (at {exc.field})" if exc.field else ""))


def _text(limit: int, optional: bool = False) -> Callable[[Any], str | None]:
    def rule(value: Any) -> str | None:
        if value is None and optional:
            return None
        if not isinstance(value, str):
            return f"{type(value).__name__} where text belongs"
        return f"{len(value):,} characters, more than {limit:,}" if len(value) > limit else None
    return rule


def _whole(low: int, high: int) -> Callable[[Any], str | None]:
    def rule(value: Any) -> str | None:
        if not isinstance(value, int) or isinstance(value, bool):
            return f"{type(value).__name__} where a whole number belongs"
        return None if low <= value <= high else f"{value} is not within {low}..{high}"
    return rule


def _number(low: float, high: float, optional: bool) -> Callable[[Any], str | None]:
    def rule(value: Any) -> str | None:
        if value is None and optional:
            return None
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return f"{type(value).__name__} where a number belongs"
        return None if math.isfinite(value) and low <= value <= high else f"{value!r} is not within {low}..{high}"
    return rule


def _flag(value: Any) -> str | None:
    """True, False (1, 0 as SQLite holds them) or None."""
    if value is None or (isinstance(value, int) and value in (0, 1)):
        return None
    shown = repr(value)
    return f"{shown if len(shown) <= 40 else shown[:30] + '…'} where true, false or null belongs"


def _json(kind: type, optional: bool = False) -> Callable[[Any], str | None]:
    def rule(value: Any) -> str | None:
        if isinstance(value, Unreadable):
            return value.problem
        if value is None and optional:
            return None
        return None if isinstance(value, kind) else f"{type(value).__name__} where a JSON {kind.__name__} belongs"
    return rule


_NAME, _OPTIONAL_NAME, _LONG = _text(MAX_STORED_NAME), _text(MAX_STORED_NAME, True), _text(MAX_STORED_TEXT)
_RUN_RULES: dict[str, Callable[[Any], str | None]] = {
    "benchmark": _NAME, "kind": _NAME, "created": _NAME, "commit": _OPTIONAL_NAME, "branch": _OPTIONAL_NAME,
    "base_branch": _OPTIONAL_NAME, "plugin_version": _NAME, "targets": _json(dict), "judge": _OPTIONAL_NAME,
    "identities": _json(dict), "verdict": _NAME, "exit_status": _whole(0, 255), "reason": _LONG,
    "cost": _number(0, float(MAX_INT), False), "scope": _NAME, "case_count": _whole(0, MAX_INT)}
_CASE_RULES: dict[str, Callable[[Any], str | None]] = {
    "node_id": _NAME, "target": _NAME, "metric": _NAME, "unit": _NAME, "sample": _whole(0, MAX_INT),
    "status": _NAME, "passed": _flag, "present": _flag, "probability": _number(0, 1, True),
    "agreement": _number(0, 1, True), "decided_by": _OPTIONAL_NAME, "justification": _LONG,
    "transcript": _json(list, True)}


def _checked(values: Mapping[str, Any], rules: Mapping[str, Callable[[Any], str | None]], where: str) -> dict[str, Any]:
    for name, rule in rules.items():
        if name in values:
            problem = rule(values[name])
            if problem is not None:
                raise StoreError(f"{where}, field '{name}': {problem}")
    return dict(values)


def check_run(run_id: Any, values: Mapping[str, Any], store: str) -> dict[str, Any]:
    """A run's columns as read back, checked for type and range; `StoreError` naming the store, the run and
    the field otherwise."""
    return _checked(values, _RUN_RULES, f"the run store {store} holds a run that cannot be read: run {run_id}")


def check_case(run_id: Any, row_id: Any, values: Mapping[str, Any], store: str) -> dict[str, Any]:
    """A case's columns as read back, checked for type and range (booleans as 0/1), `passed` and
    `present` as booleans; `StoreError` naming the store, the run, the case and the field otherwise."""
    node = values.get("node_id")
    named = f" {node[:200]!r}" if isinstance(node, str) and len(node) <= MAX_STORED_NAME else ""
    out = _checked(values, _CASE_RULES, f"the run store {store} holds a case that cannot be read: run {run_id}, "
                                        f"case{named} (row {row_id})")
    for name in ("passed", "present"):
        if out.get(name) is not None:
            out[name] = bool(out[name])
    return out


def checked_run(run: RunT, store: str) -> RunT:
    """A run the view read, checked as `check_run` checks one."""
    check_run(run.id, {name: getattr(run, name) for name in _RUN_FIELDS}, store)
    return run


def checked_case(case: CaseT, store: str) -> CaseT:
    """A case the view read, checked as `check_case` checks one; its booleans as SQLAlchemy read them
    (`check_cases` finds one the database holds as neither 0 nor 1)."""
    check_case(case.run_id, case.id, {name: getattr(case, name) for name in _CASE_FIELDS}, store)
    return case


def check_cases(conn: Connection, run_ids: Sequence[int], store: str, *, whole: bool = False) -> None:
    """The cases of these runs checked in SQL before they are read: a boolean neither 0 nor 1, a
    P(present) or agreement outside 0..1 (NaN and infinities too), a name past its bound (the view sums
    these light columns up in SQL); with `whole` (every case is about to be read with its transcript)
    also a justification or transcript past its bound, so a huge value is never fetched. The first such
    case is read raw and named by `check_case`; `StoreError`."""
    col = schema.cases.c
    shares = [or_(c < 0, c > 1) for c in (col.probability, col.agreement)]
    flags = [and_(c.is_not(None), c.not_in([True, False])) for c in (col.passed, col.present)]
    names = [func.length(c) > MAX_STORED_NAME for c in (col.node_id, col.target, col.metric, col.unit, col.status)]
    transcript = func.length(cast(col.transcript, Text))
    sizes = [func.length(col.justification) > MAX_STORED_TEXT, transcript > MAX_STORED_JSON] if whole else []
    bad = conn.execute(select(col.id).where(col.run_id.in_(list(run_ids)),
                                            or_(*shares, *flags, *names, *sizes, col.sample < 0))
                       .limit(1)).scalar()
    if bad is not None:
        light = [n for n in _CASE_FIELDS if n != "transcript"]
        row = conn.execute(select(col.run_id, transcript, *[_raw(col[n]) for n in light])
                           .where(col.id == bad)).one()
        size = row[1] or 0
        values = {**dict(zip(light, row[2:])), "transcript": Unreadable(
            f"{size:,} characters of JSON, more than the {MAX_STORED_JSON:,} a stored value may hold")
            if size > MAX_STORED_JSON else None}
        check_case(row[0], bad, values, store)


def _engine(url: str) -> Engine:
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise StoreError(f"{masked_url(url)}: --evalbench-store / EVALBENCH_STORE takes an SQLAlchemy URL, "
                         "e.g. sqlite:///runs.sqlite or postgresql+psycopg://user@host/db") from None
    args: dict[str, Any] = {"timeout": SQLITE_WAIT_S} if parsed.get_backend_name() == "sqlite" else {}
    if parsed.get_backend_name() == "postgresql":
        args = {"connect_timeout": 10}
    try:  # JSON columns written by orjson (a run of 10,000 cases is one insert), read through the boundary
        return create_engine(parsed, connect_args=args, json_serializer=_dumps, json_deserializer=load_json)
    except ImportError as exc:  # the dialect's driver is not installed
        extra = ""
        if parsed.get_backend_name() == "postgresql":
            extra = (" (pip install 'pytest-evalbench[postgres]')" if parsed.get_driver_name() == "psycopg"
                     else " (use postgresql+psycopg://... with pip install 'pytest-evalbench[postgres]')")
        raise StoreError(f"the run store {masked_url(url)} needs a database driver that is not installed: "
                         f"{_problem(exc)}{extra}") from None
    except (ArgumentError, SQLAlchemyError) as exc:  # an unknown dialect
        raise StoreError(f"the run store {masked_url(url)} cannot be opened: {_problem(exc)}") from None


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def _alembic() -> tuple[Any, Any]:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config, ScriptDirectory.from_config(config)


def _revision(conn: Connection) -> str | None:
    """The store's Alembic revision, read without importing Alembic (most opens find it at HEAD); None for
    a new store."""
    try:
        return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    except SQLAlchemyError:  # no such table: a new store
        conn.rollback()
        return None


def migrate(engine: Engine, url: str, revision: str = "head") -> None:
    """Bring the store's tables to `revision` (this version's newest by default). A store at a revision this
    version does not know was written by a newer plugin: refused. Two processes opening a new store at once:
    the one that loses the race finds the tables made by the other."""
    target = HEAD if revision == "head" else revision
    with engine.connect() as conn:
        current = _revision(conn)
    if current == target:
        return
    from alembic import command

    config, script = _alembic()
    known = {s.revision for s in script.walk_revisions()}
    if current is not None and current not in known:
        raise StoreError(f"the run store {masked_url(url)} is at revision {current}, written by a newer "
                         f"pytest-evalbench than this one ({', '.join(sorted(known))} known): upgrade "
                         "pytest-evalbench to use it")
    try:
        with engine.begin() as conn:
            _one_migration_at_a_time(conn)
            config.attributes["connection"] = conn
            command.upgrade(config, target)
    except SQLAlchemyError:
        with engine.connect() as conn:
            if _revision(conn) != target:
                raise


def _one_migration_at_a_time(conn: Connection) -> None:
    """Take the store's write lock for the migration's transaction, so a second process migrating the same
    store waits, then finds it migrated (Alembic reads the revision again inside the transaction). SQLite:
    an immediate transaction (the driver would otherwise start one only at the first row written, after
    the tables); PostgreSQL: a transaction-scoped advisory lock."""
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    elif conn.dialect.name == "postgresql":
        conn.exec_driver_sql("SELECT pg_advisory_xact_lock(7274696)")


def open_store(url: str, *, migrate_to: str = "head") -> Store:
    """The store at `url`, its tables created or upgraded; `StoreError` (one line) when it cannot be. The
    URL's credentials join the process's secrets: no driver's message can show them."""
    SECRETS.add_url(url)
    engine = _engine(url)
    try:
        migrate(engine, url, migrate_to)
    except SQLAlchemyError as exc:
        engine.dispose()
        raise StoreError(f"the run store {masked_url(url)} cannot be opened: {_problem(exc)}") from None
    except StoreError:
        engine.dispose()
        raise
    return Store(engine, url)


def sqlite_url(path: Path) -> str:
    """The SQLAlchemy URL of an SQLite file."""
    return f"sqlite:///{path}"


def known_revisions() -> Sequence[str]:
    """This version's revisions, oldest first."""
    _, script = _alembic()
    return [s.revision for s in reversed(list(script.walk_revisions()))]
