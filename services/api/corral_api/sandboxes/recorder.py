"""Writes every sandbox that reaches a terminal state to SQL (idempotent upsert)."""

import asyncio

from corral_api.quotas.service import TenantQuotas
from corral_api.sandboxes.repository import HistoryRepository
from corral_common.contracts.events import SandboxStateChanged, state_routing_keys
from corral_common.contracts.sandboxes import TERMINAL_STATES
from corral_common.store.state import StateStore
from corral_common.store.state_records import SandboxRecord

RECORDS_QUEUE = "api.records"
TERMINAL_KEYS = state_routing_keys(sorted(TERMINAL_STATES))


class TerminalRecorder:
    def __init__(self, store: StateStore, history: HistoryRepository, quotas: TenantQuotas | None = None):
        self.store = store
        self.history = history
        # The ended sandbox's share of its tenant's quota is given back (once, however often
        # the event comes: QuotaLedger.release).
        self.quotas = quotas

    async def handle(self, event: SandboxStateChanged) -> None:
        record = await self.store.get_sandbox(event.sandbox_id)
        if record is None and event.record:  # Redis lost it meanwhile: the event has it as it ended
            record = SandboxRecord.from_hash(event.record)
        if record is None:  # already expired from Redis: it was recorded back then
            return
        if event.usage is not None and record.usage is None:
            record.usage = event.usage
        await asyncio.to_thread(self.history.record, record)
        if self.quotas is not None:
            await self.quotas.release(record)
