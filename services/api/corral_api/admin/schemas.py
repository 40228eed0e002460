"""Bodies and answers of /v1/admin/* and /v1/usage."""

from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from corral_api.auth.models import ApiKey
from corral_api.quotas.schemas import Quotas
from corral_api.tenants.models import TenantRow
from corral_common.inputs import storable_text, valid_name

TenantName = Annotated[str, AfterValidator(valid_name)]


class TenantCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: TenantName
    quotas: Quotas = Field(default_factory=Quotas)


class TenantUpdate(BaseModel):
    """Only the quotas given change (null: unlimited); ``disabled`` refuses every key of the tenant (401)."""

    model_config = ConfigDict(extra="forbid")

    quotas: Quotas | None = None
    disabled: bool | None = None


class TenantUsageNow(BaseModel):
    sandboxes: int
    cpu: float
    memory_mb: int
    disk_mb: int
    image_bytes: int | None = Field(description="Null when image-service could not be asked")


class TenantUsageTotals(BaseModel):
    """Of the tenant's ended sandboxes (billing): wall time × what each asked for."""

    cpu_s: float = Field(description="CPU seconds used")
    memory_mb_s: float = Field(description="MiB·s: memory asked for × wall time")
    sandbox_hours: float
    sandboxes_ended: int


class TenantUsage(BaseModel):
    tenant: str
    current: TenantUsageNow
    totals: TenantUsageTotals


class Tenant(BaseModel):
    name: str
    created_at: datetime
    disabled: bool
    quotas: Quotas

    @classmethod
    def of(cls, row: TenantRow) -> "Tenant":
        return cls(name=row.name, created_at=row.created_at, disabled=row.disabled, quotas=Quotas(**row.quotas))


class TenantDetail(Tenant):
    usage: TenantUsage


class TenantList(BaseModel):
    tenants: list[Tenant]


class KeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant: str = Field(min_length=1, max_length=128)
    name: Annotated[str, AfterValidator(storable_text)] = Field("", max_length=64)
    role: Literal["tenant", "operator"] = "tenant"


class Key(BaseModel):
    """A key as listed: never the key itself (only its first characters, ``prefix``)."""

    id: str
    tenant: str
    name: str
    role: str
    prefix: str
    created_at: datetime
    revoked_at: datetime | None

    @classmethod
    def of(cls, row: ApiKey) -> "Key":
        return cls(id=row.id, tenant=row.tenant, name=row.name, role=row.role, prefix=row.prefix,
                   created_at=row.created_at, revoked_at=row.revoked_at)


class KeyList(BaseModel):
    keys: list[Key]


class CreatedKey(Key):
    key: str = Field(description="The key: shown this once, stored only as its hash")


class RotatedKey(CreatedKey):
    replaces: str = Field(description="Id of the key this one replaces (revoked now)")
