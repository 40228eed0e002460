"""Alembic environment.

Used two ways: programmatically (``corral_image_service.db.migrate`` hands over a live
connection in ``config.attributes["connection"]``), or from the command line with
``alembic -c services/image-service/alembic.ini upgrade head``, which takes the URL from
``ImageServiceSettings`` (``CORRAL_IMAGE_DATABASE_URL`` / data dir).
"""

# Imported for their side effect: registering the tables on ImageModel.metadata.
from alembic import context

import corral_image_service.disk_images.models
import corral_image_service.environments.models
import corral_image_service.imports.models
import corral_image_service.layers.models  # noqa: F401
from corral_common.migrations import serialize_migrations
from corral_image_service.db.engine import ImageModel, make_engine
from corral_image_service.db.migrate import VERSION_TABLE

target_metadata = ImageModel.metadata


def _run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        version_table=VERSION_TABLE,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        serialize_migrations(connection)  # replicas starting together take turns
        context.run_migrations()


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    from corral_image_service.settings import ImageServiceSettings

    url = context.config.get_main_option("sqlalchemy.url") or ImageServiceSettings().effective_database_url
    engine = make_engine(url)
    with engine.begin() as conn:
        _run(conn)
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported; run against a database")
run_migrations_online()
