"""Environments: a named, immutable combination of existing layers.

Nothing is built here: a new toolkit version is a new environment name pointing at
layers (and therefore blobs) that already exist.
"""

from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from corral_common.errors import Conflict, NotFound, Unprocessable
from corral_image_service.db.engine import as_utc, session_scope
from corral_image_service.environments.models import Environment
from corral_image_service.environments.repository import EnvironmentRepository
from corral_image_service.environments.schemas import (
    EnvironmentIn,
    EnvironmentLayer,
    EnvironmentOut,
)
from corral_image_service.layers.models import Layer
from corral_image_service.layers.repository import LayerRepository

_SLOTS = (("base", "base_layer_id"), ("workspace", "workspace_layer_id"), ("toolkit", "toolkit_layer_id"))


def _ref(layer: Layer | None) -> str | None:
    return f"{layer.name}:{layer.version}" if layer else None


def environment_out(env: Environment, layers: dict[int, Layer]) -> EnvironmentOut:
    slot = {kind: layers.get(getattr(env, col)) if getattr(env, col) else None for kind, col in _SLOTS}
    return EnvironmentOut(
        name=env.name,
        base=_ref(slot["base"]),
        workspace=_ref(slot["workspace"]),
        toolkit=_ref(slot["toolkit"]),
        layers=[EnvironmentLayer(kind=layer.kind, name=layer.name, version=layer.version,
                                 digest=layer.digest, size=layer.size)
                for layer in (slot["base"], slot["workspace"], slot["toolkit"]) if layer],
        created_at=as_utc(env.created_at),
    )


class EnvironmentService:
    def __init__(self, engine: Engine):
        self.engine = engine

    def _resolve(self, session: Session, body: EnvironmentIn) -> dict[str, Layer | None]:
        repo = LayerRepository(session)
        resolved: dict[str, Layer | None] = {}
        for kind, _ in _SLOTS:
            ref = getattr(body, kind)
            if ref is None:
                resolved[kind] = None
                continue
            name, version = ref.split(":", 1)
            layer = repo.get(name, version)
            if layer is None:
                raise Unprocessable(f"{kind}: layer {ref} does not exist", loc=["body", kind], code="unknown_layer")
            if layer.kind != kind:
                raise Unprocessable(f"{kind}: layer {ref} is a {layer.kind} layer, not {kind}",
                                    loc=["body", kind], code="wrong_layer_kind")
            resolved[kind] = layer
        return resolved

    def _out(self, session: Session, env: Environment) -> EnvironmentOut:
        ids = [getattr(env, col) for _, col in _SLOTS if getattr(env, col)]
        return environment_out(env, LayerRepository(session).get_many(ids))

    def create(self, body: EnvironmentIn) -> tuple[EnvironmentOut, bool]:
        with session_scope(self.engine) as session:
            layers = self._resolve(session, body)
            wanted = {col: (layers[kind].id if layers[kind] else None) for kind, col in _SLOTS}
            repo = EnvironmentRepository(session)
            existing = repo.get(body.name)
            if existing is None:
                try:
                    return self._out(session, repo.add(Environment(name=body.name, **wanted))), True
                except IntegrityError:
                    session.rollback()
                    existing = repo.get(body.name)
                    if existing is None:
                        raise
            current = self._out(session, existing)
            if any(getattr(existing, col) != wanted[col] for _, col in _SLOTS):
                raise Conflict(
                    f"environment {body.name} already exists with a different combination of layers; "
                    f"environments are immutable, use a new name",
                    code="environment_exists", extra={"existing": current.model_dump(mode="json")},
                )
            return current, False

    def get(self, name: str) -> EnvironmentOut:
        with session_scope(self.engine) as session:
            env = EnvironmentRepository(session).get(name)
            if env is None:
                raise NotFound(f"environment {name} not found", loc=["path", "name"], code="environment_not_found")
            return self._out(session, env)

    def list(self) -> list[EnvironmentOut]:
        with session_scope(self.engine) as session:
            envs = EnvironmentRepository(session).list()
            ids = [getattr(e, col) for e in envs for _, col in _SLOTS if getattr(e, col)]
            layers = LayerRepository(session).get_many(ids)
            return [environment_out(e, layers) for e in envs]
