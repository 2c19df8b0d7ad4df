"""The store's Alembic revisions, oldest first."""
