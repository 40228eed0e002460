from collections.abc import Iterable

from sqlmodel import Session, select

from corral_image_service.layers.models import Layer


class LayerRepository:
    def __init__(self, session: Session):
        self.session = session

    def get(self, name: str, version: str) -> Layer | None:
        return self.session.exec(select(Layer).where(Layer.name == name, Layer.version == version)).first()

    def get_many(self, ids: Iterable[int]) -> dict[int, Layer]:
        ids = list(set(ids))
        if not ids:
            return {}
        return {layer.id: layer for layer in self.session.exec(select(Layer).where(Layer.id.in_(ids)))}

    def list(self, kind: str | None = None) -> list[Layer]:
        stmt = select(Layer).order_by(Layer.name, Layer.created_at, Layer.id)
        if kind:
            stmt = stmt.where(Layer.kind == kind)
        return list(self.session.exec(stmt))

    def add(self, layer: Layer) -> Layer:
        self.session.add(layer)
        self.session.commit()
        self.session.refresh(layer)
        return layer
