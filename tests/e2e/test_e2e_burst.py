"""No load drops a connection: bursts of 600 concurrent execs from one tenant (more than its
tenant_max_inflight of 256) are each answered, 200 or 429, round after round."""

import asyncio
import collections
import time

import httpx

ROUNDS, REQUESTS, CLIENTS = 3, 600, 6


def test_bursts_of_600_concurrent_execs_are_all_answered(platform, corral):
    headers = {"authorization": f"Bearer {platform['api_key']}"}
    with corral.sandboxes.create("busybox", memory_mb=64) as sb:
        url = f"{platform['api']}/v1/sandboxes/{sb.id}/exec"

        async def one(http: httpx.AsyncClient) -> str:
            try:
                response = await http.post(url, json={"cmd": ["echo", "hi"]}, headers=headers)
            except httpx.HTTPError as exc:
                return type(exc).__name__
            return str(response.status_code)

        async def burst() -> collections.Counter:
            clients = [httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=REQUESTS // CLIENTS))
                       for _ in range(CLIENTS)]
            try:
                results = await asyncio.gather(*(one(clients[i % CLIENTS]) for i in range(REQUESTS)))
            finally:
                for client in clients:
                    await client.aclose()
            return collections.Counter(results)

        started = time.monotonic()
        for round_ in range(ROUNDS):
            outcome = asyncio.run(burst())
            print(f"round {round_}: {dict(outcome)} after {time.monotonic() - started:.1f} s")
            assert set(outcome) <= {"200", "429"}, f"round {round_}: {dict(outcome)}"
            assert outcome["200"] > 0
