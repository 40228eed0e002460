"""Tenants' billing totals in SQL."""

from sqlalchemy import Integer, cast, func
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from corral_api.sandboxes.models import SandboxHistory


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
