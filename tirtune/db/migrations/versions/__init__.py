"""The schema's revisions, one module each, loaded by Alembic by path (it skips this file)."""
