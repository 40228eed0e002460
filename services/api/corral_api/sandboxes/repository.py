"""Durable history of ended sandboxes (SQL)."""

from datetime import UTC, datetime

from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from corral_api.sandboxes.models import SandboxHistory
from corral_common.contracts.sandboxes import SandboxSpec, SandboxState, Usage
from corral_common.store.state_records import SandboxRecord


def _ts(value: float | None) -> datetime | None:
    return datetime.fromtimestamp(value, UTC) if value is not None else None


class HistoryRepository:
    def __init__(self, engine: Engine):
        self.engine = engine

    def record(self, record: SandboxRecord) -> None:
        """Upsert by id, so a re-delivered terminal event writes the same row again."""
        usage = record.usage or Usage()
        row = SandboxHistory(
            id=record.id, tenant=record.tenant, environment=record.spec.environment,
            backend="container" if record.spec.backend == "auto" else record.spec.backend,
            node_id=record.node_id, state=record.state.value, reason=record.reason,
            error=record.error[:500] if record.error else None,
            spec=record.spec.model_dump(mode="json"), labels=record.spec.labels, runtime=record.runtime or None,
            created_at=_ts(record.created_at), started_at=_ts(record.started_at), ended_at=_ts(record.ended_at),
            cpu_seconds=usage.cpu_seconds, peak_memory_bytes=usage.peak_memory_bytes,
            wall_time_s=usage.wall_time_s or ((record.ended_at or 0) - (record.started_at or record.ended_at or 0)),
        )
        with Session(self.engine) as session:
            session.merge(row)
            session.commit()

    def get(self, sandbox_id: str) -> SandboxRecord | None:
        with Session(self.engine) as session:
            row = session.get(SandboxHistory, sandbox_id)
        if row is None:
            return None

        def epoch(value: datetime | None) -> float | None:
            if value is None:
                return None
            return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()

        return SandboxRecord(
            id=row.id, tenant=row.tenant, state=SandboxState(row.state), spec=SandboxSpec.model_validate(row.spec),
            created_at=epoch(row.created_at) or 0.0, updated_at=epoch(row.ended_at) or 0.0, reason=row.reason,
            error=row.error,
            node_id=row.node_id, started_at=epoch(row.started_at), ended_at=epoch(row.ended_at),
            usage=Usage(cpu_seconds=row.cpu_seconds, peak_memory_bytes=row.peak_memory_bytes,
                        wall_time_s=row.wall_time_s),
            runtime=row.runtime or {},
        )

    def states_with_prefix(self, prefix: str) -> dict[str, str]:
        """id → final state of every ended sandbox whose id starts with prefix (a job's)."""
        query = select(SandboxHistory.id, SandboxHistory.state).where(col(SandboxHistory.id).startswith(
            prefix, autoescape=True))
        with Session(self.engine) as session:
            return dict(session.exec(query).all())
