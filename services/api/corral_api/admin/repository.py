"""Tenants and their billing totals in SQL."""

from sqlalchemy import Integer, cast, func
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from corral_api.admin.models import TenantRow
from corral_api.sandboxes.models import SandboxHistory


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


class UsageRepository:
    """Billing totals of a tenant's ended sandboxes, summed in SQL from their history rows
    (written once each by the api's terminal-event consumer), so they survive any restart."""

    def __init__(self, engine: Engine):
        self.engine = engine

    def totals(self, tenant: str) -> dict[str, float]:
        memory_mb = cast(col(SandboxHistory.spec)["memory_mb"].as_string(), Integer)
        query = select(func.coalesce(func.sum(SandboxHistory.cpu_seconds), 0.0),
                       func.coalesce(func.sum(SandboxHistory.wall_time_s * memory_mb), 0.0),
                       func.coalesce(func.sum(SandboxHistory.wall_time_s), 0.0),
                       func.count()).where(SandboxHistory.tenant == tenant)
        with Session(self.engine) as session:
            cpu_s, memory_mb_s, wall_s, count = session.exec(query).one()
        return {"cpu_s": float(cpu_s), "memory_mb_s": float(memory_mb_s), "sandbox_hours": float(wall_s) / 3600,
                "sandboxes_ended": int(count)}
