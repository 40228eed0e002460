"""A tenant's quotas as the create paths read them: the api's Quotas model (absent: unlimited),
not a dict, cached per auth version."""

from types import SimpleNamespace

import redis.asyncio as aioredis

from corral_api.quotas.schemas import Quotas
from corral_api.quotas.service import TenantQuotas


class Rows:
    def __init__(self):
        self.reads = 0

    def get(self, tenant):
        self.reads += 1
        return SimpleNamespace(quotas={"max_fncall_per_s": 5.0, "max_image_bytes": 10}) if tenant == "acme" else None


class Version:
    async def current(self):
        return "v1"


class Ledger:
    def __init__(self):
        self.redis = aioredis.Redis()  # never connected: the fncall path below goes to take_fncall only
        self.rates: list[float | None] = []

    async def take_fncall(self, tenant, calls, rate, loc):
        self.rates.append(rate)


async def test_quotas_are_the_model_and_the_create_paths_read_its_fields():
    rows, ledger = Rows(), Ledger()
    quotas = TenantQuotas(rows, ledger, Version())
    got = await quotas.quotas("acme")
    assert isinstance(got, Quotas) and (got.max_fncall_per_s, got.max_sandboxes) == (5.0, None)
    await quotas.take_fncall("acme", 3)
    await quotas.take_fncall("nobody", 3)
    assert ledger.rates == [5.0, None]
    assert await quotas.image_quota_bytes("acme", 99) == 10
    assert await quotas.image_quota_bytes("nobody", 99) == 99
    assert rows.reads == 2  # one read per tenant, the rest from the cache (same auth version)
    await ledger.redis.aclose()
