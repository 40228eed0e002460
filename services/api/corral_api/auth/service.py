"""API keys: each key belongs to one tenant and has a role (``tenant``, or ``operator`` for the
admin routes); only its sha256 is stored, with a public id, a name and the first characters.

Revocation must hold at once on every api replica. The answer key → principal is cached in
process (a request then costs no SQL), but every cached answer is tagged with the *auth
version*, a random token in Redis (``auth:version``) that every change to keys or tenants
replaces; a request reads that one Redis string (one GET, ~0.1 ms, on the connection pool
every request already uses) and an answer made under another version is looked up in SQL
again. Why not pub/sub or a TTL alone: a subscriber hears a revocation some time after the
revoking call returned, and a TTL some seconds later, so a request sent right after the
revoke could still pass on another replica; a version read per request cannot be stale once
the revoke's SET returned. Why a random token and not a counter: a Redis that lost its data
starts a new token, which matches no cached answer (a counter would start again at 1 and could
match one). When Redis cannot be read, the lookup goes to SQL (correct, only slower).
"""

import asyncio
import hashlib
import secrets
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from redis import asyncio as aioredis
from redis.exceptions import RedisError
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from corral_api.auth.models import OPERATOR_ROLE, TENANT_ROLE, ApiKey
from corral_api.tenants.models import TenantRow

AUTH_VERSION_KEY = "auth:version"
# A cached answer is also dropped after this long (a bound for rows changed in SQL by hand).
CACHE_TTL_S = 60.0
# A bound on the cache: keys are few; past this it is emptied rather than grown.
CACHE_MAX_ENTRIES = 100_000
PREFIX_CHARS = 6


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    return "ck_" + secrets.token_urlsafe(24)


def new_key_id() -> str:
    return f"key-{secrets.token_hex(8)}"


def parse_bootstrap_keys(spec: str, setting: str = "CORRAL_API_KEYS") -> list[tuple[str, str]]:
    """``"tenant:key,tenant2:key2"`` → [(tenant, key), ...]."""
    pairs = []
    for item in filter(None, (part.strip() for part in spec.split(","))):
        tenant, sep, key = item.partition(":")
        if not sep or not tenant or len(key) < 8:
            raise ValueError(f"{setting} entry {item.split(':')[0]!r} must be name:key with a key of 8+ chars")
        pairs.append((tenant, key))
    return pairs


@dataclass(frozen=True)
class Principal:
    """Who a request is: the key's tenant, its role and the key's public id."""

    tenant: str
    role: str
    key_id: str

    @property
    def is_operator(self) -> bool:
        return self.role == OPERATOR_ROLE


class AuthVersion:
    """The token every change to keys, tenants or quotas replaces (see the module docstring)."""

    def __init__(self, redis: aioredis.Redis | None):
        self.redis = redis

    async def current(self) -> str | None:
        """None: no Redis to ask (callers then do not cache)."""
        if self.redis is None:
            return None
        try:
            version = await self.redis.get(AUTH_VERSION_KEY)
            if version is None:  # never set, or Redis lost its data: a new token matches no cache
                await self.redis.set(AUTH_VERSION_KEY, uuid.uuid4().hex, nx=True)
                version = await self.redis.get(AUTH_VERSION_KEY)
        except RedisError:
            return None
        return version.decode() if isinstance(version, bytes) else version

    async def bump(self) -> None:
        """Raises when Redis is away: a revocation that could not be announced is not reported done."""
        if self.redis is not None:
            await self.redis.set(AUTH_VERSION_KEY, uuid.uuid4().hex)


class ApiKeyService:
    def __init__(self, engine: Engine, redis: aioredis.Redis | None = None):
        self.engine = engine
        self.version = AuthVersion(redis)
        self._cache: dict[str, tuple[Principal, str, float]] = {}

    # ---- bootstrap (settings at api start) -------------------------------------------------

    def add(self, tenant: str, key: str | None = None, *, role: str = TENANT_ROLE, name: str = "") -> str:
        """Store ``key`` (a new one when None) for ``tenant``, creating the tenant if new. A key
        already stored keeps its row as it is: a bootstrap key revoked through the admin api
        stays revoked after a restart (remove it from the setting as well)."""
        key = key or new_key()
        digest = hash_key(key)
        for attempt in range(2):  # replicas starting together: the one that lost the insert race reads again
            try:
                with Session(self.engine) as session:
                    if session.get(TenantRow, tenant) is None:
                        session.add(TenantRow(name=tenant))
                    if session.get(ApiKey, digest) is None:
                        session.add(ApiKey(key_hash=digest, id=new_key_id(), tenant=tenant, role=role,
                                           name=name or role, prefix=key[:PREFIX_CHARS]))
                    session.commit()
                break
            except IntegrityError:
                if attempt:
                    raise
        return key

    # ---- lookups ---------------------------------------------------------------------------

    def lookup(self, key: str) -> Principal | None:
        """The key's principal from SQL: None for an unknown or revoked key or a disabled tenant."""
        return self._lookup_digest(hash_key(key))

    def _lookup_digest(self, digest: str) -> Principal | None:
        with Session(self.engine) as session:
            row = session.get(ApiKey, digest)
            if row is None or row.revoked_at is not None:
                return None
            tenant = session.get(TenantRow, row.tenant)
            if tenant is not None and tenant.disabled:
                return None
            return Principal(tenant=row.tenant, role=row.role, key_id=row.id)

    def tenant_for(self, key: str) -> str | None:
        """The key's tenant straight from SQL (no cache): for callers without an event loop."""
        principal = self.lookup(key)
        return principal.tenant if principal else None

    async def authenticate(self, key: str) -> Principal | None:
        return await self.authenticate_digest(hash_key(key))

    async def authenticate_digest(self, digest: str) -> Principal | None:
        """As ``authenticate``, from the key's sha256: what a dashboard session keeps, so that
        revoking the key it logged in with (or disabling its tenant) ends the session at once."""
        version = await self.version.current()
        cached = self._cache.get(digest)
        now = time.monotonic()
        if cached is not None and version is not None and cached[1] == version and cached[2] > now:
            return cached[0]
        try:
            principal = await asyncio.to_thread(self._lookup_digest, digest)
        except Exception:
            # SQL away: an answer of the current version whose TTL ran out is still right
            # (nothing changed since, or the version would differ), so known keys keep working.
            if cached is not None and version is not None and cached[1] == version:
                return cached[0]
            raise
        if principal is None:
            self._cache.pop(digest, None)
        elif version is not None:
            if len(self._cache) >= CACHE_MAX_ENTRIES:
                self._cache.clear()
            self._cache[digest] = (principal, version, now + CACHE_TTL_S)
        return principal

    # ---- administration (SQL; the admin service announces each change) -----------------------

    def create(self, tenant: str, *, name: str = "", role: str = TENANT_ROLE) -> tuple[ApiKey, str]:
        key = new_key()
        row = ApiKey(key_hash=hash_key(key), id=new_key_id(), tenant=tenant, name=name, role=role,
                     prefix=key[:PREFIX_CHARS])
        with Session(self.engine) as session:
            session.add(row)
            session.commit()
            session.refresh(row)
        return row, key

    def list(self, tenant: str | None = None) -> list[ApiKey]:
        query = select(ApiKey).order_by(col(ApiKey.created_at), col(ApiKey.id))
        if tenant is not None:
            query = query.where(ApiKey.tenant == tenant)
        with Session(self.engine) as session:
            return list(session.exec(query).all())

    def get(self, key_id: str) -> ApiKey | None:
        with Session(self.engine) as session:
            return session.exec(select(ApiKey).where(ApiKey.id == key_id)).first()

    def revoke(self, key_id: str) -> ApiKey | None:
        """Marks the key revoked (idempotent: a second revoke keeps the first time)."""
        with Session(self.engine) as session:
            row = session.exec(select(ApiKey).where(ApiKey.id == key_id)).first()
            if row is None:
                return None
            if row.revoked_at is None:
                row.revoked_at = datetime.now(UTC)
                session.add(row)
                session.commit()
                session.refresh(row)
            return row

    def rotate(self, key_id: str) -> tuple[ApiKey, str, ApiKey] | None:
        """A new key of the same tenant, name and role, and the old one revoked, in one
        transaction: (new row, new key, old row). None: no such key, or it is revoked already."""
        key = new_key()
        with Session(self.engine) as session:
            old = session.exec(select(ApiKey).where(ApiKey.id == key_id)).first()
            if old is None or old.revoked_at is not None:
                return None
            new = ApiKey(key_hash=hash_key(key), id=new_key_id(), tenant=old.tenant, name=old.name, role=old.role,
                         prefix=key[:PREFIX_CHARS])
            old.revoked_at = datetime.now(UTC)
            session.add(old)
            session.add(new)
            session.commit()
            session.refresh(new)
            session.refresh(old)
        return new, key, old
