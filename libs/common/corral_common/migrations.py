"""One migration at a time per database, whichever replica or service runs it.

Replicas of a service start together (a Deployment of two api pods) and each upgrades the
schema at start; on one empty PostgreSQL database two concurrent upgrades both create the
same tables and one fails. ``serialize_migrations`` takes a transaction-scoped advisory lock
inside Alembic's migration transaction: the second replica waits, then finds the schema at
head and does nothing. PostgreSQL runs DDL in the transaction, so the lock covers all of it.
SQLite needs nothing: its database is one file, and writers already take turns.
"""

from typing import Any

# pg_advisory_xact_lock key: one for every Corral service, so services sharing a database
# (api and image-service keep their own version tables in one) also take turns.
MIGRATION_LOCK_KEY = 0x636F7272616C  # "corral"


def serialize_migrations(connection: Any) -> None:
    """Call inside ``context.begin_transaction()``, before ``context.run_migrations()``:
    blocks until no other migration runs on this PostgreSQL database; no-op elsewhere."""
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})")
