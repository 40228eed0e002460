"""What E2B needs beyond a Corral sandbox record, in Redis beside it (AOF, like the records):
the templateID and metadata as the client sent them, the envd access token, and the deadline
``set_timeout`` moves. Deadlines are also one sorted set, which the reaper reads."""

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field

import redis.asyncio as aioredis

DEADLINES_KEY = "e2b:deadlines"


_CLAIM_IF_DUE = """
local deadline = redis.call('ZSCORE', KEYS[1], ARGV[1])
if deadline and tonumber(deadline) <= tonumber(ARGV[2]) then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return deadline
end
return false
"""


def _key(sandbox_id: str) -> str:
    return f"e2b:sb:{sandbox_id}"


def _token_key(token: str) -> str:
    # Hashed: Redis never holds a usable token under a key name.
    return "e2b:token:" + hashlib.sha256(token.encode()).hexdigest()


@dataclass
class E2bRecord:
    sandbox_id: str
    tenant: str
    template_id: str
    access_token: str
    deadline: float
    metadata: dict[str, str] = field(default_factory=dict)
    # Sent by the code interpreter on its context calls (which carry no access token).
    traffic_token: str = ""


class E2bRepository:
    def __init__(self, redis: aioredis.Redis, keep_s: int):
        self.redis = redis
        # Records outlive their sandbox a little (a late call still finds the tenant), then go.
        self.keep_s = keep_s

    async def put(self, record: E2bRecord) -> None:
        data = asdict(record)
        data["metadata"] = json.dumps(record.metadata)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(_key(record.sandbox_id), mapping={k: str(v) for k, v in data.items()})
            pipe.expire(_key(record.sandbox_id), self.keep_s)
            pipe.set(_token_key(record.access_token), record.sandbox_id, ex=self.keep_s)
            pipe.zadd(DEADLINES_KEY, {record.sandbox_id: record.deadline})
            await pipe.execute()

    async def get(self, sandbox_id: str) -> E2bRecord | None:
        data = await self.redis.hgetall(_key(sandbox_id))
        if not data:
            return None
        return E2bRecord(sandbox_id=data["sandbox_id"], tenant=data["tenant"], template_id=data["template_id"],
                         access_token=data["access_token"], deadline=float(data["deadline"]),
                         metadata=json.loads(data.get("metadata") or "{}"),
                         traffic_token=data.get("traffic_token", ""))

    async def sandbox_of_token(self, token: str) -> str | None:
        """The sandbox an envd access token was minted for (clients that send no
        ``E2b-Sandbox-Id``: e2b < 2.2x after ``Sandbox.connect``)."""
        return await self.redis.get(_token_key(token))

    async def get_many(self, sandbox_ids: list[str]) -> dict[str, E2bRecord]:
        out = {}
        for sandbox_id in sandbox_ids:  # few per tenant; a pipeline is not worth the code
            record = await self.get(sandbox_id)
            if record is not None:
                out[sandbox_id] = record
        return out

    async def set_deadline(self, sandbox_id: str, deadline: float) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(_key(sandbox_id), "deadline", str(deadline))
            pipe.zadd(DEADLINES_KEY, {sandbox_id: deadline})
            await pipe.execute()

    async def due(self, now: float | None = None, limit: int = 100) -> list[str]:
        return await self.redis.zrangebyscore(DEADLINES_KEY, "-inf", now or time.time(), start=0, num=limit)

    async def claim(self, sandbox_id: str, now: float | None = None) -> float | None:
        """Take a sandbox off the deadline set if its deadline is still past (one Lua call:
        a ``set_timeout`` between ``due`` and here moved it, and then the sandbox stays);
        only one reaper (of any replica) wins. Returns the deadline it took (None: not due,
        or taken by another)."""
        taken = await self.redis.eval(_CLAIM_IF_DUE, 1, DEADLINES_KEY, sandbox_id, repr(now or time.time()))
        return float(taken) if taken is not None else None

    async def unclaim(self, sandbox_id: str, deadline: float) -> None:
        """Give a claimed deadline back (the kill failed: the next pass tries again), unless
        the sandbox got a new one meanwhile."""
        await self.redis.zadd(DEADLINES_KEY, {sandbox_id: deadline}, nx=True)

    async def forget_deadline(self, sandbox_id: str) -> None:
        await self.redis.zrem(DEADLINES_KEY, sandbox_id)
