from alembic import context
from sqlalchemy import engine_from_config, pool
from sqlmodel import SQLModel

import corral_api.auth.models  # noqa: F401  (registers tables)
import corral_api.jobs.models  # noqa: F401
import corral_api.rollouts.models  # noqa: F401
import corral_api.sandboxes.models  # noqa: F401
import corral_api.snapshots.models  # noqa: F401
import corral_api.tenants.models  # noqa: F401
from corral_common.migrations import serialize_migrations

config = context.config
target_metadata = SQLModel.metadata


def run_migrations_online() -> None:
    connectable = engine_from_config(config.get_section(config.config_ini_section) or {}, prefix="sqlalchemy.",
                                     poolclass=pool.NullPool)
    with connectable.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata,
                          render_as_batch=connection.dialect.name == "sqlite")
        with context.begin_transaction():
            serialize_migrations(connection)  # replicas starting together take turns
            context.run_migrations()


run_migrations_online()
