"""Alembic's script folder: `env.py` and the revisions under `versions/`, run by `tirtune.db.migrate`."""
