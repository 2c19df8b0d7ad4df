"""Alembic's migration environment of the store (`env.py`) and its revisions (`versions/`)."""
