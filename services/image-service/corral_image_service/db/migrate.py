"""Run Alembic programmatically (the app does ``upgrade head`` at startup)."""

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection, Engine

SCRIPT_LOCATION = str(Path(__file__).with_name("alembic"))
# Own version table: services may share one PostgreSQL database, and a shared
# "alembic_version" would make each service's migrations trample the others'.
VERSION_TABLE = "alembic_version_image_service"


def alembic_config(connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    if connection is not None:
        # Passing the connection (not the URL) avoids configparser '%' interpolation of
        # passwords and lets callers pick a schema/search_path first.
        cfg.attributes["connection"] = connection
    return cfg


def run_migrations(bind: Engine | Connection, revision: str = "head") -> None:
    if isinstance(bind, Engine):
        with bind.begin() as conn:
            command.upgrade(alembic_config(conn), revision)
    else:
        command.upgrade(alembic_config(bind), revision)


def downgrade(bind: Engine | Connection, revision: str = "base") -> None:
    if isinstance(bind, Engine):
        with bind.begin() as conn:
            command.downgrade(alembic_config(conn), revision)
    else:
        command.downgrade(alembic_config(bind), revision)
