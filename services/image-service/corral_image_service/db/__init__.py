from corral_image_service.db.engine import ImageModel, make_engine, session_scope
from corral_image_service.db.migrate import run_migrations

__all__ = ["ImageModel", "make_engine", "run_migrations", "session_scope"]
