"""Alembic's environment: the store hands it an open connection (`store.db.migrate`), never a URL.

Alembic executes this file under a module name of its own; imported as part of the package (a test that
imports every module), it only defines `run`."""

from __future__ import annotations

from alembic import context

from pytest_evalbench.store.schema import metadata


def run() -> None:
    context.configure(connection=context.config.attributes["connection"], target_metadata=metadata)
    with context.begin_transaction():
        context.run_migrations()


if not __name__.startswith("pytest_evalbench."):
    run()
