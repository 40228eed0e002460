"""What administration costs per request: key lookup (cached answer + the auth-version GET
against the SQL lookup it replaces) and the quota admission script, against a real Redis.

    python bench/admin_auth.py --redis-url redis://127.0.0.1:6379/0 [--n 2000] [--json out.json]

SQLite in a temp dir holds the keys (the api's default database).
"""

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from corral_api.auth.service import ApiKeyService
from corral_api.db.engine import make_engine, migrate
from corral_api.quotas.ledger import Demand, QuotaLedger
from corral_common.store.state import StateStore


async def timed(n: int, call) -> dict[str, float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - start) * 1e6)
    samples.sort()
    return {"p50_us": round(statistics.median(samples), 1), "p99_us": round(samples[int(len(samples) * 0.99)], 1)}


async def main(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'api.db'}"
        migrate(url)
        engine = make_engine(url)
        store = StateStore.from_url(args.redis_url)
        keys = ApiKeyService(engine, store.redis)
        key = keys.add("bench", "bench-key-0123456789")
        await keys.authenticate(key)
        results = {"cached_lookup": await timed(args.n, lambda: keys.authenticate(key)),
                   "sql_lookup": await timed(args.n, lambda: asyncio.to_thread(keys.lookup, key))}
        ledger = QuotaLedger(store.redis)
        tenant = f"bench-{uuid.uuid4().hex[:6]}"
        counter = iter(range(10 ** 9))
        results["quota_admit"] = await timed(args.n, lambda: ledger.admit(
            tenant, f"sb-{next(counter)}", Demand(1, 0.1, 64, 64), {"max_sandboxes": 10 ** 9}, ["body"]))
        # Concurrent admissions against a quota of 100: never more than 100.
        racing = f"{tenant}-race"

        async def one(i: int) -> bool:
            try:
                await ledger.admit(racing, f"sb-{i}", Demand(1, 0.1, 64, 64), {"max_sandboxes": 100}, ["body"])
                return True
            except Exception:  # noqa: BLE001 - the 429
                return False
        admitted = sum(await asyncio.gather(*(one(i) for i in range(1000))))
        results["concurrent_1000_against_100"] = {"admitted": admitted}
        for t in (tenant, racing):
            await store.redis.delete(f"quota:used:{t}", f"quota:entries:{t}")
        await store.close()
        engine.dispose()
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    out = asyncio.run(main(args))
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
