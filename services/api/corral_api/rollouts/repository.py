"""SQL access for rollouts and their steps (sync; the service calls it via asyncio.to_thread).

Every write that matters for exactly-once is a single statement or transaction: a step is
claimed by inserting its row (the primary key (rollout_id, step_index) makes a second claim
fail) and completed by an UPDATE ... WHERE status = 'pending' AND executor = me.
"""

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import insert, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from corral_api.rollouts.models import RolloutRow, RolloutStepRow

# Core tables for the hot writes: a plain connection costs a fraction of an ORM session.
ROLLOUTS = RolloutRow.__table__  # type: ignore[attr-defined]
STEPS = RolloutStepRow.__table__  # type: ignore[attr-defined]


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
        with self.engine.begin() as conn:
            return conn.execute(stmt.values(updated_at=now_dt(), **values)).rowcount > 0

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

    def step_by_key(self, rollout_id: str, request_key: str) -> RolloutStepRow | None:
        with Session(self.engine) as session:
            return session.exec(select(RolloutStepRow).where(RolloutStepRow.rollout_id == rollout_id,
                                                             RolloutStepRow.request_key == request_key)).first()

    def lookup(self, rollout_id: str, index: int) -> tuple[RolloutRow | None, RolloutStepRow | None, bool]:
        """(rollout, its step at ``index``, whether any step is pending), on one connection."""
        with self.engine.connect() as conn:
            row = conn.execute(select(ROLLOUTS).where(ROLLOUTS.c.id == rollout_id)).mappings().first()
            if row is None:
                return None, None, False
            step = conn.execute(select(STEPS).where(STEPS.c.rollout_id == rollout_id, STEPS.c.step_index == index)
                                ).mappings().first()
            pending = conn.execute(select(STEPS.c.step_index).where(
                STEPS.c.rollout_id == rollout_id, STEPS.c.status == "pending").limit(1)).first()
        rollout = RolloutRow(**{("meta" if key == "metadata" else key): value for key, value in row.items()})
        return rollout, RolloutStepRow(**step) if step is not None else None, pending is not None

    def count_replay(self, rollout_id: str, index: int) -> int:
        """One more answer of a committed step from the log; returns the new count."""
        with Session(self.engine) as session:
            count = session.execute(update(RolloutStepRow).where(col(RolloutStepRow.rollout_id) == rollout_id,
                                                                 col(RolloutStepRow.step_index) == index)
                                    .values(replays=col(RolloutStepRow.replays) + 1)
                                    .returning(col(RolloutStepRow.replays))).scalar()
            session.commit()
            return count or 0

    def has_pending(self, rollout_id: str) -> bool:
        with Session(self.engine) as session:
            return session.exec(select(RolloutStepRow.step_index).where(
                RolloutStepRow.rollout_id == rollout_id, RolloutStepRow.status == "pending").limit(1)).first() is not None

    def claim(self, row: RolloutStepRow, *, expires_at: float | None) -> bool:
        """Insert a pending step and count it on its rollout, in one transaction.
        False when the index is taken already (another request claimed it first)."""
        values = {c.name: getattr(row, c.name) for c in STEPS.columns}
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(STEPS).values(**values))
                conn.execute(update(ROLLOUTS).where(ROLLOUTS.c.id == row.rollout_id).values(
                    step_count=ROLLOUTS.c.step_count + 1, pause_at=None, expires_at=expires_at, updated_at=now_dt()))
        except IntegrityError:
            return False
        return True

    def complete(self, rollout_id: str, index: int, executor: str, *, status: str, observation: dict | None,
                 error: dict | None, duration_ms: float, finished_at: datetime | None = None,
                 rollout_values: dict[str, Any] | None = None) -> bool:
        """Commit a step's outcome (only while this executor still holds it pending), and in the
        same transaction the rollout's new idle deadlines (``rollout_values``)."""
        with self.engine.begin() as conn:
            done = conn.execute(update(STEPS).where(
                STEPS.c.rollout_id == rollout_id, STEPS.c.step_index == index, STEPS.c.status == "pending",
                STEPS.c.executor == executor,
            ).values(status=status, observation=observation, error=error, finished_at=finished_at or now_dt(),
                     duration_ms=duration_ms)).rowcount > 0
            if done and rollout_values:
                conn.execute(update(ROLLOUTS).where(ROLLOUTS.c.id == rollout_id,
                                                    ROLLOUTS.c.status.in_(["active", "paused"]))
                             .values(updated_at=now_dt(), **rollout_values))
            return done

    def renew(self, rollout_id: str, index: int, executor: str, lease_until: float) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(STEPS).where(
                STEPS.c.rollout_id == rollout_id, STEPS.c.step_index == index, STEPS.c.status == "pending",
                STEPS.c.executor == executor,
            ).values(lease_until=lease_until))

    def interrupt_expired(self, now: float, rollout_id: str | None = None) -> int:
        """Pending steps whose executor stopped renewing its lease (the api died): interrupted."""
        stmt = update(STEPS).where(STEPS.c.status == "pending", STEPS.c.lease_until < now)
        if rollout_id is not None:
            stmt = stmt.where(STEPS.c.rollout_id == rollout_id)
        with self.engine.begin() as conn:
            return conn.execute(stmt.values(
                status="interrupted", finished_at=now_dt(),
                error={"status": 409, "code": "step_interrupted",
                       "message": "the api stopped while this step ran; whether it took effect is unknown"})).rowcount
