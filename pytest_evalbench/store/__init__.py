"""The run store: every run, with its cases, kept in a database (SQLite by default, PostgreSQL for a
team) through SQLAlchemy, its tables migrated by Alembic. Imported only where a run is recorded (the
session's finish, `evalbench merge`) and by the commands that read runs, never at pytest's startup."""

from __future__ import annotations

from collections.abc import Mapping

STORE_ENV = "EVALBENCH_STORE"
OFF = "none"


def store_setting(given: str | None, env: Mapping[str, str]) -> str | None:
    """The store the option (`given`) or `EVALBENCH_STORE` names, "" for the default file, None when the
    value is `none` (recording off). Here, beside no database module, so that a run or a merge with
    recording off decides so without importing SQLAlchemy."""
    value = (given or env.get(STORE_ENV) or "").strip()
    return None if value.lower() == OFF else value
