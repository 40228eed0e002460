"""SQLModel engine and session helpers (SQLite by default, PostgreSQL by URL)."""

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import registry
from sqlmodel import Session, SQLModel, create_engine


class ImageModel(SQLModel, registry=registry()):
    """Base of this service's tables.

    A private registry/metadata so that other services' SQLModel tables, imported into the
    same process (e.g. one pytest run over the whole repo), never collide with ours.
    """


def make_engine(url: str, **pool: Any) -> Engine:
    """``pool``: the bounds of the connection pool (``CommonSettings.sql_pool()``); a checkout
    that waits past ``pool_timeout`` raises, and the service answers 503 (corral_common.web.overload)."""
    if url.startswith("sqlite"):
        # Blocking endpoints run in a threadpool, so connections cross threads.
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, **pool)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA foreign_keys=ON")
            # WAL lets the blob/GET paths read while an upload commits.
            cur.execute("PRAGMA journal_mode=WAL")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True, **pool)


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    with Session(engine, expire_on_commit=False) as session:
        yield session


def utcnow() -> datetime:
    return datetime.now(UTC)


def as_utc(dt: datetime) -> datetime:
    # SQLite drops the tzinfo on the way back; everything we store is UTC.
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)
