"""The run store: every run, with its cases, kept in a database (SQLite by default, PostgreSQL for a
team) through SQLAlchemy, its tables migrated by Alembic. Imported only where a run is recorded (the
session's finish, `evalbench merge`) and by the commands that read runs, never at pytest's startup."""
