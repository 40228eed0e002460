"""SQL engine and Alembic migrations for the api's durable records (keys, sandbox history)."""

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import create_engine

MIGRATIONS = Path(__file__).parent / "migrations"


def make_engine(url: str, **pool: Any) -> Engine:
    """``pool``: the bounds of the connection pool (``CommonSettings.sql_pool()``); a checkout
    that waits past ``pool_timeout`` raises, and the api answers 503 (corral_common.web.overload)."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False}, **pool)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(conn, _):  # WAL: readers never block the event recorder
            cur = conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True, **pool)


def migrate(url: str) -> None:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url)
    command.upgrade(cfg, "head")
