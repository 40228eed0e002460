"""API keys: each key belongs to one tenant; a tenant sees only its own sandboxes."""

import hashlib
import secrets

from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from corral_api.auth.models import ApiKey


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def parse_bootstrap_keys(spec: str) -> list[tuple[str, str]]:
    """``"tenant:key,tenant2:key2"`` → [(tenant, key), ...]."""
    pairs = []
    for item in filter(None, (part.strip() for part in spec.split(","))):
        tenant, sep, key = item.partition(":")
        if not sep or not tenant or len(key) < 8:
            raise ValueError(f"CORRAL_API_KEYS entry {item.split(':')[0]!r} must be tenant:key with a key of 8+ chars")
        pairs.append((tenant, key))
    return pairs


class ApiKeyService:
    def __init__(self, engine: Engine):
        self.engine = engine
        self._cache: dict[str, str] = {}

    def add(self, tenant: str, key: str | None = None) -> str:
        key = key or secrets.token_urlsafe(24)
        with Session(self.engine) as session:
            session.merge(ApiKey(key_hash=hash_key(key), tenant=tenant))
            session.commit()
        return key

    def tenant_for(self, key: str) -> str | None:
        digest = hash_key(key)
        if digest in self._cache:
            return self._cache[digest]
        with Session(self.engine) as session:
            row = session.exec(select(ApiKey).where(ApiKey.key_hash == digest)).first()
        if row is not None:
            self._cache[digest] = row.tenant
            return row.tenant
        return None
