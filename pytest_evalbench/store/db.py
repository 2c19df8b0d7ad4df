"""Opening a store (its tables migrated to this version's revision), writing a run in one transaction and
reading runs back. The one place that talks to the database; everything above it sees `RunData`.

A store is named by an SQLAlchemy URL (`sqlite:///.evalbench/runs.sqlite`,
`postgresql+psycopg://user:password@host/db`); the URL is never shown with its password or query
(`masked_url`). A newer plugin upgrades an older store on open; an older plugin refuses a store whose
revision it does not know (`StoreError`, one line).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import orjson
from sqlalchemy import Engine, create_engine, desc, func, insert, select, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from pytest_evalbench.base.errors import EvalbenchError
from pytest_evalbench.base.safe_text import SECRETS, redact
from pytest_evalbench.store.schema import ItemRow, RunRow

MIGRATIONS = Path(__file__).parent / "migrations"
HEAD = "0002"
"""This version's newest revision (`migrations/versions/`): a store at it opens without importing Alembic."""
INSERT_ROWS = 500
"""Cases per INSERT statement when a run is recorded."""
SQLITE_WAIT_S = 60.0
"""How long an SQLite writer waits for another process's transaction before giving up."""


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
        (`record.CaseRows`) is read that way too: a run of 100,000 cases never holds all of them, their
        transcripts and their insert parameters at once."""
        rows = run.cases if cases is None else cases
        values = {name: getattr(run, name) for name in _RUN_FIELDS}
        values["case_count"] = len(rows)
        with self._errors("written"), self.engine.begin() as conn:
            run_id = int(conn.execute(insert(RunRow).values(**values).returning(RunRow.id)).scalar_one())
            for start in range(0, len(rows), INSERT_ROWS):
                conn.execute(insert(ItemRow), [{"run_id": run_id, **{n: getattr(c, n) for n in _CASE_FIELDS}}
                                               for c in rows[start:start + INSERT_ROWS]])
        run.id = run_id
        return run_id

    def runs(self, benchmark: str | None = None, *, branch: str | None = None,
             limit: int | None = None) -> list[RunData]:
        """Runs (without their cases), newest first; of one benchmark and branch when given."""
        query = select(RunRow.__table__).order_by(desc(RunRow.created), desc(RunRow.id))
        if benchmark is not None:
            query = query.where(RunRow.benchmark == benchmark)
        if branch is not None:
            query = query.where(RunRow.branch == branch)
        if limit is not None:
            query = query.limit(limit)
        with self._errors("read"), self.engine.connect() as conn:
            return [_run_data(row) for row in conn.execute(query)]

    def run(self, run_id: int) -> RunData | None:
        """One run with its cases (in the order recorded), or None when the store has no such run."""
        with self._errors("read"), self.engine.connect() as conn:
            row = conn.execute(select(RunRow.__table__).where(RunRow.id == run_id)).first()
            if row is None:
                return None
            run = _run_data(row)
            cases = conn.execute(select(*[getattr(ItemRow, n) for n in _CASE_FIELDS])
                                 .where(ItemRow.run_id == run_id).order_by(ItemRow.id))
            run.cases = [ItemData(**dict(zip(_CASE_FIELDS, c))) for c in cases]
        return run

    def benchmarks(self) -> list[str]:
        """The benchmarks with a run in the store, by name."""
        with self._errors("read"), self.engine.connect() as conn:
            return list(conn.execute(select(RunRow.benchmark).group_by(RunRow.benchmark)
                                     .order_by(RunRow.benchmark)).scalars())

    def count(self) -> int:
        """How many runs the store holds."""
        with self._errors("read"), self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(RunRow)).scalar_one())


def _run_data(row: Any) -> RunData:
    """A `runs` row (Core: its columns by name) as a `RunData` without cases."""
    data = RunData(**{name: getattr(row, name) for name in _RUN_FIELDS})
    data.id = int(row.id)
    return data


def _engine(url: str) -> Engine:
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise StoreError(f"{masked_url(url)}: --evalbench-store / EVALBENCH_STORE takes an SQLAlchemy URL, "
                         "e.g. sqlite:///runs.sqlite or postgresql+psycopg://user@host/db") from None
    args: dict[str, Any] = {"timeout": SQLITE_WAIT_S} if parsed.get_backend_name() == "sqlite" else {}
    if parsed.get_backend_name() == "postgresql":
        args = {"connect_timeout": 10}
    try:  # JSON columns (transcripts) through orjson, the package's JSON encoder: a run of 10,000 cases is one insert
        return create_engine(parsed, connect_args=args, json_serializer=_dumps, json_deserializer=orjson.loads)
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
