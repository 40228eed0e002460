from sqlmodel import Session, select

from corral_image_service.environments.models import Environment


class EnvironmentRepository:
    def __init__(self, session: Session):
        self.session = session

    def get(self, name: str) -> Environment | None:
        return self.session.exec(select(Environment).where(Environment.name == name)).first()

    def list(self) -> list[Environment]:
        return list(self.session.exec(select(Environment).order_by(Environment.name)))

    def add(self, env: Environment) -> Environment:
        self.session.add(env)
        self.session.commit()
        self.session.refresh(env)
        return env
