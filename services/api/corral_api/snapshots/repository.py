"""SQL access for snapshot records (sync; the service calls it via asyncio.to_thread)."""

from collections.abc import Sequence

from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from corral_api.snapshots.models import SnapshotRow


class SnapshotRepository:
    def __init__(self, engine: Engine):
        self.engine = engine

    def add(self, row: SnapshotRow) -> SnapshotRow:
        with Session(self.engine, expire_on_commit=False) as session:
            session.add(row)
            session.commit()
        return row

    def get(self, snapshot_id: str) -> SnapshotRow | None:
        with Session(self.engine) as session:
            return session.get(SnapshotRow, snapshot_id)

    def list(self, tenant: str, sandbox_id: str | None = None, limit: int = 1000) -> Sequence[SnapshotRow]:
        query = select(SnapshotRow).where(SnapshotRow.tenant == tenant)
        if sandbox_id is not None:
            query = query.where(SnapshotRow.sandbox_id == sandbox_id)
        query = query.order_by(col(SnapshotRow.created_at), col(SnapshotRow.id)).limit(limit)
        with Session(self.engine) as session:
            return session.exec(query).all()

    def delete(self, snapshot_id: str) -> bool:
        with Session(self.engine) as session:
            row = session.get(SnapshotRow, snapshot_id)
            if row is None:
                return False
            session.delete(row)
            session.commit()
        return True
