"""Environments: a named, immutable combination of existing layers, per owner.

Nothing is built here: a new toolkit version is a new environment name pointing at
layers (and therefore blobs) that already exist. A tenant's environment may stack its
own layers and the shared catalogue's; a name resolves to the tenant's own first.
"""

import json

from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from corral_common.contracts.images import ImageConfig
from corral_common.web.errors import Conflict, NotFound, Unprocessable
from corral_image_service.db.engine import as_utc, session_scope
from corral_image_service.environments.models import Environment
from corral_image_service.environments.repository import EnvironmentRepository
from corral_image_service.environments.schemas import EnvironmentIn, EnvironmentLayer, EnvironmentOut
from corral_image_service.layers.models import SHARED_OWNER, Layer
from corral_image_service.layers.repository import LayerRepository

_SLOTS = (("base", "base_layer_id"), ("workspace", "workspace_layer_id"), ("toolkit", "toolkit_layer_id"))


def _ref(layer: Layer | None) -> str | None:
    return f"{layer.name}:{layer.version}" if layer else None


def _diff_ids(env: Environment) -> list[int]:
    return json.loads(env.diff_layer_ids) if env.diff_layer_ids else []


def _layer_ids(env: Environment) -> list[int]:
    return [getattr(env, col) for _, col in _SLOTS if getattr(env, col)] + _diff_ids(env)


def environment_out(env: Environment, layers: dict[int, Layer]) -> EnvironmentOut:
    slot = {kind: layers.get(getattr(env, col)) if getattr(env, col) else None for kind, col in _SLOTS}
    diffs = [layers[i] for i in _diff_ids(env)]
    stacked = [layer for layer in (slot["base"], slot["workspace"], slot["toolkit"], *diffs) if layer]
    return EnvironmentOut(
        owner=env.owner,
        name=env.name,
        base=_ref(slot["base"]),
        workspace=_ref(slot["workspace"]),
        toolkit=_ref(slot["toolkit"]),
        diffs=[_ref(layer) for layer in diffs],
        layers=[EnvironmentLayer(kind=layer.kind, name=layer.name, version=layer.version,
                                 digest=layer.digest, size=layer.size) for layer in stacked],
        config=ImageConfig.model_validate_json(env.config) if env.config else None,
        created_at=as_utc(env.created_at),
    )


class EnvironmentService:
    def __init__(self, engine: Engine):
        self.engine = engine

    @staticmethod
    def _layer(repo: LayerRepository, ref: str, kind: str, loc: list, owner: str) -> Layer:
        name, version = ref.split(":", 1)
        layer = repo.visible(name, version, owner)
        if layer is None:
            raise Unprocessable(f"{kind}: layer {ref} does not exist", loc=loc, code="unknown_layer")
        if layer.kind != kind:
            raise Unprocessable(f"{kind}: layer {ref} is a {layer.kind} layer, not {kind}",
                                loc=loc, code="wrong_layer_kind")
        return layer

    def _resolve(self, session: Session, body: EnvironmentIn, owner: str) -> tuple[dict[str, Layer | None], list[int]]:
        repo = LayerRepository(session)
        resolved = {kind: self._layer(repo, getattr(body, kind), kind, ["body", kind], owner)
                    if getattr(body, kind) else None for kind, _ in _SLOTS}
        diffs = [self._layer(repo, ref, "diff", ["body", "diffs", i], owner).id for i, ref in enumerate(body.diffs)]
        return resolved, diffs

    def _out(self, session: Session, env: Environment) -> EnvironmentOut:
        return environment_out(env, LayerRepository(session).get_many(_layer_ids(env)))

    def create(self, body: EnvironmentIn, owner: str = SHARED_OWNER) -> tuple[EnvironmentOut, bool]:
        with session_scope(self.engine) as session:
            layers, diffs = self._resolve(session, body, owner)
            wanted = {col: (layers[kind].id if layers[kind] else None) for kind, col in _SLOTS}
            wanted["diff_layer_ids"] = json.dumps(diffs) if diffs else None
            wanted["config"] = body.config.model_dump_json() if body.config else None
            repo = EnvironmentRepository(session)
            existing = repo.get(body.name, owner)
            if existing is None:
                try:
                    return self._out(session, repo.add(Environment(owner=owner, name=body.name, **wanted))), True
                except IntegrityError:
                    session.rollback()
                    existing = repo.get(body.name, owner)
                    if existing is None:
                        raise
            current = self._out(session, existing)
            if any(getattr(existing, col) != value for col, value in wanted.items() if col != "config") or (
                    current.config != body.config):
                raise Conflict(
                    f"environment {body.name} already exists with a different combination of layers or config; "
                    f"environments are immutable, use a new name",
                    code="environment_exists", extra={"existing": current.model_dump(mode="json")},
                )
            return current, False

    def get(self, name: str, owner: str = SHARED_OWNER) -> EnvironmentOut:
        with session_scope(self.engine) as session:
            env = EnvironmentRepository(session).visible(name, owner)
            if env is None:
                raise NotFound(f"environment {name} not found", loc=["path", "name"], code="environment_not_found")
            return self._out(session, env)

    def delete(self, name: str, owner: str = SHARED_OWNER) -> EnvironmentOut:
        """Forget owner's environment (its layers stay: delete them on their own)."""
        with session_scope(self.engine) as session:
            repo = EnvironmentRepository(session)
            env = repo.get(name, owner)
            if env is None:
                raise NotFound(f"environment {name} not found", loc=["path", "name"], code="environment_not_found")
            out = self._out(session, env)
            repo.delete(env)
            return out

    def list(self, owner: str = SHARED_OWNER) -> list[EnvironmentOut]:
        with session_scope(self.engine) as session:
            envs = EnvironmentRepository(session).list(owner)
            layers = LayerRepository(session).get_many([i for e in envs for i in _layer_ids(e)])
            return [environment_out(e, layers) for e in envs]
