from sqlmodel import Session, select

from corral_image_service.environments.models import Environment
from corral_image_service.layers.models import SHARED_OWNER


class EnvironmentRepository:
    def __init__(self, session: Session):
        self.session = session

    def get(self, name: str, owner: str = SHARED_OWNER) -> Environment | None:
        return self.session.exec(select(Environment).where(Environment.owner == owner,
                                                           Environment.name == name)).first()

    def visible(self, name: str, owner: str) -> Environment | None:
        """The owner's own environment of that name, else the shared catalogue's."""
        return self.get(name, owner) or (self.get(name) if owner != SHARED_OWNER else None)

    def list(self, owner: str = SHARED_OWNER) -> list[Environment]:
        stmt = select(Environment).where(Environment.owner.in_({SHARED_OWNER, owner}))
        return list(self.session.exec(stmt.order_by(Environment.name, Environment.owner)))

    def add(self, env: Environment) -> Environment:
        self.session.add(env)
        self.session.commit()
        self.session.refresh(env)
        return env

    def delete(self, env: Environment) -> None:
        self.session.delete(env)
        self.session.commit()
