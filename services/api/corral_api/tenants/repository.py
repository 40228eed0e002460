"""Tenants in SQL (their quotas are a JSON column of the row)."""

from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from corral_api.tenants.models import TenantRow


class TenantRepository:
    def __init__(self, engine: Engine):
        self.engine = engine

    def get(self, name: str) -> TenantRow | None:
        with Session(self.engine) as session:
            return session.get(TenantRow, name)

    def list(self) -> list[TenantRow]:
        with Session(self.engine) as session:
            return list(session.exec(select(TenantRow).order_by(col(TenantRow.name))).all())

    def create(self, name: str, quotas: dict) -> TenantRow | None:
        """None: a tenant of that name exists."""
        row = TenantRow(name=name, quotas=quotas)
        with Session(self.engine) as session:
            session.add(row)
            try:
                session.commit()
            except IntegrityError:
                return None
            session.refresh(row)
            return row

    def update(self, name: str, quotas: dict | None = None, disabled: bool | None = None) -> TenantRow | None:
        """``quotas``: the keys to set (a None value: unlimited); others keep their value."""
        with Session(self.engine) as session:
            row = session.get(TenantRow, name)
            if row is None:
                return None
            if quotas is not None:
                row.quotas = {k: v for k, v in {**row.quotas, **quotas}.items() if v is not None}
            if disabled is not None:
                row.disabled = disabled
            session.add(row)
            session.commit()
            session.refresh(row)
            return row
