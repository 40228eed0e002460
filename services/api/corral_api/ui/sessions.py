"""Dashboard sessions: a random token in an HttpOnly, SameSite=Strict cookie; the session itself
(tenant, CSRF token) lives in Redis under the token's sha256, with a sliding TTL, so a Redis dump
holds no usable cookie and a logout or an expiry ends it everywhere at once."""

import hashlib
import secrets
import time
from dataclasses import dataclass

import redis.asyncio as aioredis

COOKIE = "corral_ui"
PREFIX = "ui:session:"


@dataclass(frozen=True)
class UiSession:
    tenant: str
    csrf: str
    created_at: float
    # The sha256 of the API key it logged in with (never the key): each request checks the key
    # still holds, so a revoked key or a disabled tenant ends its sessions at once.
    key_hash: str = ""


def session_key(token: str) -> str:
    return PREFIX + hashlib.sha256(token.encode()).hexdigest()


class UiSessions:
    def __init__(self, redis: aioredis.Redis, ttl_s: int):
        self.redis = redis
        self.ttl_s = ttl_s

    async def create(self, tenant: str, key_hash: str = "") -> tuple[str, UiSession]:
        token = secrets.token_urlsafe(32)
        session = UiSession(tenant=tenant, csrf=secrets.token_urlsafe(32), created_at=time.time(), key_hash=key_hash)
        key = session_key(token)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping={"tenant": session.tenant, "csrf": session.csrf,
                                    "created_at": str(session.created_at), "key_hash": key_hash})
            pipe.expire(key, self.ttl_s)
            await pipe.execute()
        return token, session

    async def get(self, token: str | None) -> UiSession | None:
        if not token or len(token) > 128:
            return None
        key = session_key(token)
        data = await self.redis.hgetall(key)
        if not data or "tenant" not in data:
            return None
        await self.redis.expire(key, self.ttl_s)  # sliding: an open dashboard stays logged in
        return UiSession(tenant=data["tenant"], csrf=data["csrf"], created_at=float(data["created_at"]),
                         key_hash=data.get("key_hash", ""))

    async def delete(self, token: str | None) -> None:
        if token and len(token) <= 128:
            await self.redis.delete(session_key(token))
