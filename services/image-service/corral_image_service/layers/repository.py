from collections.abc import Iterable

from sqlalchemy import func
from sqlmodel import Session, select

from corral_image_service.layers.models import SHARED_OWNER, Layer


class LayerRepository:
    def __init__(self, session: Session):
        self.session = session

    def get(self, name: str, version: str, owner: str = SHARED_OWNER) -> Layer | None:
        return self.session.exec(select(Layer).where(Layer.owner == owner, Layer.name == name,
                                                     Layer.version == version)).first()

    def visible(self, name: str, version: str, owner: str) -> Layer | None:
        """The owner's own layer of that name, else the shared catalogue's."""
        return self.get(name, version, owner) or (self.get(name, version) if owner != SHARED_OWNER else None)

    def get_many(self, ids: Iterable[int]) -> dict[int, Layer]:
        ids = list(set(ids))
        if not ids:
            return {}
        return {layer.id: layer for layer in self.session.exec(select(Layer).where(Layer.id.in_(ids)))}

    def list(self, kind: str | None = None, owner: str = SHARED_OWNER) -> list[Layer]:
        owners = {SHARED_OWNER, owner}
        stmt = select(Layer).where(Layer.owner.in_(owners)).order_by(Layer.name, Layer.created_at, Layer.id)
        if kind:
            stmt = stmt.where(Layer.kind == kind)
        return list(self.session.exec(stmt))

    def usage(self, owner: str, excluding_digest: str | None = None) -> tuple[int, int]:
        """(bytes of the owner's distinct digests, number of its layers)."""
        rows = self.session.exec(select(Layer.digest, Layer.size).where(Layer.owner == owner)).all()
        sizes = {digest: size for digest, size in rows if digest != excluding_digest}
        return sum(sizes.values()), len(rows)

    def digest_referenced(self, digest: str) -> bool:
        return bool(self.session.exec(select(func.count()).select_from(Layer).where(Layer.digest == digest)).one())

    def add(self, layer: Layer) -> Layer:
        self.session.add(layer)
        self.session.commit()
        self.session.refresh(layer)
        return layer

    def delete(self, layer: Layer) -> None:
        self.session.delete(layer)
        self.session.commit()
