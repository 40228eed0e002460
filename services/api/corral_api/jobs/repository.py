"""SQL access for job rows (sync; the service calls it via asyncio.to_thread)."""

from collections.abc import Sequence

from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from corral_api.jobs.models import JobRow


class JobRepository:
    def __init__(self, engine: Engine):
        self.engine = engine

    def add(self, row: JobRow) -> None:
        with Session(self.engine) as session:
            session.add(row)
            session.commit()

    def mark_deleted(self, job_id: str) -> None:
        with Session(self.engine) as session:
            row = session.get(JobRow, job_id)
            if row is not None and not row.deleted:
                row.deleted = True
                session.add(row)
                session.commit()

    def live(self) -> Sequence[JobRow]:
        """Every job not deleted, oldest first."""
        query = select(JobRow).where(col(JobRow.deleted).is_(False)).order_by(col(JobRow.created_at))
        with Session(self.engine, expire_on_commit=False) as session:
            return session.exec(query).all()
