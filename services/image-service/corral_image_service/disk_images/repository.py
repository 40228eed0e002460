from sqlmodel import Session, select

from corral_image_service.disk_images.models import DiskImage


class DiskImageRepository:
    def __init__(self, session: Session):
        self.session = session

    def get(self, name: str, version: str) -> DiskImage | None:
        return self.session.exec(select(DiskImage).where(DiskImage.name == name,
                                                         DiskImage.version == version)).first()

    def latest(self, name: str) -> DiskImage | None:
        return self.session.exec(select(DiskImage).where(DiskImage.name == name)
                                 .order_by(DiskImage.created_at.desc(), DiskImage.id.desc())).first()

    def list(self) -> list[DiskImage]:
        return list(self.session.exec(select(DiskImage).order_by(DiskImage.name, DiskImage.created_at, DiskImage.id)))

    def add(self, image: DiskImage) -> DiskImage:
        self.session.add(image)
        self.session.commit()
        self.session.refresh(image)
        return image
