"""SQL access for rollouts and their steps (sync; the service calls it via asyncio.to_thread).

Every write that matters for exactly-once is a single statement or transaction: a step is
claimed by inserting its row (the primary key (rollout_id, step_index) makes a second claim
fail) and completed by an UPDATE ... WHERE status = 'pending' AND executor = me.
"""

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from corral_api.rollouts.models import RolloutRow, RolloutStepRow


def now_dt() -> datetime:
    return datetime.now(UTC)


class RolloutRepository:
    def __init__(self, engine: Engine):
        self.engine = engine

    # ---- rollouts -------------------------------------------------------------------

    def create(self, row: RolloutRow) -> RolloutRow:
        with Session(self.engine, expire_on_commit=False) as session:
            session.add(row)
            session.commit()
        return row

    def get(self, rollout_id: str) -> RolloutRow | None:
        with Session(self.engine) as session:
            return session.get(RolloutRow, rollout_id)

    def list(self, tenant: str, job_id: str | None, status: str | None, limit: int) -> Sequence[RolloutRow]:
        query = select(RolloutRow).where(RolloutRow.tenant == tenant)
        if job_id is not None:
            query = query.where(RolloutRow.job_id == job_id)
        if status is not None:
            query = query.where(RolloutRow.status == status)
        with Session(self.engine) as session:
            return session.exec(query.order_by(col(RolloutRow.created_at)).limit(limit)).all()

    def update(self, rollout_id: str, *, from_status: Sequence[str] | None = None, **values: Any) -> bool:
        """Set fields; with ``from_status`` only while the status is one of those (compare-and-set)."""
        stmt = update(RolloutRow).where(col(RolloutRow.id) == rollout_id)
        if from_status is not None:
            stmt = stmt.where(col(RolloutRow.status).in_(list(from_status)))
        with Session(self.engine) as session:
            result = session.exec(stmt.values(updated_at=now_dt(), **values))  # type: ignore[call-overload]
            session.commit()
            return result.rowcount > 0

    def due_for_pause(self, now: float, limit: int = 100) -> Sequence[RolloutRow]:
        with Session(self.engine) as session:
            return session.exec(select(RolloutRow).where(RolloutRow.status == "active", col(RolloutRow.pause_at) < now)
                                .limit(limit)).all()

    def due_for_expiry(self, now: float, limit: int = 100) -> Sequence[RolloutRow]:
        with Session(self.engine) as session:
            return session.exec(select(RolloutRow).where(col(RolloutRow.status).in_(["active", "paused"]),
                                                         col(RolloutRow.expires_at) < now).limit(limit)).all()

    # ---- steps ----------------------------------------------------------------------

    def steps(self, rollout_id: str) -> Sequence[RolloutStepRow]:
        with Session(self.engine) as session:
            return session.exec(select(RolloutStepRow).where(RolloutStepRow.rollout_id == rollout_id)
                                .order_by(col(RolloutStepRow.step_index))).all()

    def step(self, rollout_id: str, index: int) -> RolloutStepRow | None:
        with Session(self.engine) as session:
            return session.get(RolloutStepRow, (rollout_id, index))

    def lookup(self, rollout_id: str, index: int) -> tuple[RolloutRow | None, RolloutStepRow | None, bool]:
        """(rollout, its step at ``index``, whether any step is pending), in one session."""
        with Session(self.engine) as session:
            row = session.get(RolloutRow, rollout_id)
            if row is None:
                return None, None, False
            step = session.get(RolloutStepRow, (rollout_id, index))
            pending = session.exec(select(RolloutStepRow.step_index).where(
                RolloutStepRow.rollout_id == rollout_id, RolloutStepRow.status == "pending").limit(1)).first()
            return row, step, pending is not None

    def has_pending(self, rollout_id: str) -> bool:
        with Session(self.engine) as session:
            return session.exec(select(RolloutStepRow.step_index).where(
                RolloutStepRow.rollout_id == rollout_id, RolloutStepRow.status == "pending").limit(1)).first() is not None

    def claim(self, row: RolloutStepRow, *, expires_at: float | None) -> bool:
        """Insert a pending step and count it on its rollout, in one transaction.
        False when the index is taken already (another request claimed it first)."""
        with Session(self.engine, expire_on_commit=False) as session:
            try:
                session.add(row)
                session.flush()
                session.exec(update(RolloutRow).where(col(RolloutRow.id) == row.rollout_id)  # type: ignore[call-overload]
                             .values(step_count=RolloutRow.step_count + 1, pause_at=None, expires_at=expires_at,
                                     updated_at=now_dt()))
                session.commit()
            except IntegrityError:
                session.rollback()
                return False
        return True

    def complete(self, rollout_id: str, index: int, executor: str, *, status: str, observation: dict | None,
                 error: dict | None, duration_ms: float, finished_at: datetime | None = None,
                 rollout_values: dict[str, Any] | None = None) -> bool:
        """Commit a step's outcome (only while this executor still holds it pending), and in the
        same transaction the rollout's new idle deadlines (``rollout_values``)."""
        with Session(self.engine) as session:
            result = session.exec(update(RolloutStepRow).where(  # type: ignore[call-overload]
                col(RolloutStepRow.rollout_id) == rollout_id, col(RolloutStepRow.step_index) == index,
                col(RolloutStepRow.status) == "pending", col(RolloutStepRow.executor) == executor,
            ).values(status=status, observation=observation, error=error, finished_at=finished_at or now_dt(),
                     duration_ms=duration_ms))
            if result.rowcount > 0 and rollout_values:
                session.exec(update(RolloutRow).where(  # type: ignore[call-overload]
                    col(RolloutRow.id) == rollout_id, col(RolloutRow.status).in_(["active", "paused"]),
                ).values(updated_at=now_dt(), **rollout_values))
            session.commit()
            return result.rowcount > 0

    def renew(self, rollout_id: str, index: int, executor: str, lease_until: float) -> None:
        with Session(self.engine) as session:
            session.exec(update(RolloutStepRow).where(  # type: ignore[call-overload]
                col(RolloutStepRow.rollout_id) == rollout_id, col(RolloutStepRow.step_index) == index,
                col(RolloutStepRow.status) == "pending", col(RolloutStepRow.executor) == executor,
            ).values(lease_until=lease_until))
            session.commit()

    def interrupt_expired(self, now: float, rollout_id: str | None = None) -> int:
        """Pending steps whose executor stopped renewing its lease (the api died): interrupted."""
        stmt = update(RolloutStepRow).where(col(RolloutStepRow.status) == "pending",
                                            col(RolloutStepRow.lease_until) < now)
        if rollout_id is not None:
            stmt = stmt.where(col(RolloutStepRow.rollout_id) == rollout_id)
        with Session(self.engine) as session:
            result = session.exec(stmt.values(  # type: ignore[call-overload]
                status="interrupted", finished_at=now_dt(),
                error={"status": 409, "code": "step_interrupted",
                       "message": "the api stopped while this step ran; whether it took effect is unknown"}))
            session.commit()
            return result.rowcount
