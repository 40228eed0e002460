"""Administration with an operator key: tenants and their quotas, API keys, usage.

    with Corral(api_key=OPERATOR_KEY) as corral:
        corral.admin.tenants.create("team-a", max_sandboxes=100, max_cpu=64)
        key = corral.admin.keys.create("team-a", name="trainer")   # key["key"]: shown this once
        corral.admin.keys.rotate(key["id"])                         # the old key is refused at once
        corral.admin.tenants.update("team-a", max_sandboxes=None)   # None: unlimited
        corral.admin.tenants.get("team-a")["usage"]["totals"]       # cpu_s, memory_mb_s, sandbox_hours

    with Corral() as corral:          # any tenant key
        corral.usage()                # that tenant's own usage

Answers are the api's JSON as dicts (docs/admin.md). ``AsyncCorral.admin`` is the same with ``await``.
"""

from typing import Any

from corral import _calls as calls
from corral._transport import Flavored, Op, operation

QUOTA_KEYS = ("max_sandboxes", "max_cpu", "max_memory_mb", "max_disk_mb", "max_image_bytes", "max_fncall_per_s")


def _quotas(quotas: dict[str, Any]) -> dict[str, Any]:
    unknown = set(quotas) - set(QUOTA_KEYS)
    if unknown:
        raise TypeError(f"unknown quota(s) {sorted(unknown)}; quotas are {', '.join(QUOTA_KEYS)}")
    return quotas


class _TenantsOps(Flavored):
    @operation
    def list(self) -> Op[list[dict[str, Any]]]:
        return (yield calls.list_tenants())

    @operation
    def create(self, name: str, **quotas: Any) -> Op[dict[str, Any]]:
        """A new tenant with these quotas (max_sandboxes=..., max_cpu=...; absent: unlimited)."""
        return (yield calls.create_tenant({"name": name, "quotas": _quotas(quotas)}))

    @operation
    def get(self, name: str) -> Op[dict[str, Any]]:
        """The tenant, its quotas and its usage."""
        return (yield calls.get_tenant(name))

    @operation
    def update(self, name: str, *, disabled: bool | None = None, **quotas: Any) -> Op[dict[str, Any]]:
        """Set the quotas given (None: unlimited); others keep their value. ``disabled``: refuse its keys."""
        body: dict[str, Any] = {"quotas": _quotas(quotas)}
        if disabled is not None:
            body["disabled"] = disabled
        return (yield calls.update_tenant(name, body))


class _KeysOps(Flavored):
    @operation
    def list(self, tenant: str | None = None) -> Op[list[dict[str, Any]]]:
        return (yield calls.list_keys(tenant))

    @operation
    def create(self, tenant: str, *, name: str = "", role: str = "tenant") -> Op[dict[str, Any]]:
        """A new key; the answer's ``key`` is shown this once."""
        return (yield calls.create_key({"tenant": tenant, "name": name, "role": role}))

    @operation
    def rotate(self, key_id: str) -> Op[dict[str, Any]]:
        """A new key in place of ``key_id`` (``replaces``); the old one is refused at once."""
        return (yield calls.rotate_key(key_id))

    @operation
    def revoke(self, key_id: str) -> Op[dict[str, Any]]:
        return (yield calls.revoke_key(key_id))


class Tenants(_TenantsOps, flavor="sync"):
    pass


class AsyncTenants(_TenantsOps, flavor="async"):
    pass


class Keys(_KeysOps, flavor="sync"):
    pass


class AsyncKeys(_KeysOps, flavor="async"):
    pass


class Admin:
    def __init__(self, corral: Any):
        self.tenants = Tenants(corral)
        self.keys = Keys(corral)


class AsyncAdmin:
    def __init__(self, corral: Any):
        self.tenants = AsyncTenants(corral)
        self.keys = AsyncKeys(corral)


class _UsageOps(Flavored):
    @operation
    def usage(self) -> Op[dict[str, Any]]:
        """The caller's tenant's usage: ``current`` (live sandboxes, image bytes) and ``totals``."""
        return (yield calls.get_usage())


class Usage(_UsageOps, flavor="sync"):
    pass


class AsyncUsage(_UsageOps, flavor="async"):
    pass
