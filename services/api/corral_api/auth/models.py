from datetime import UTC, datetime

from sqlmodel import Field, SQLModel

TENANT_ROLE = "tenant"
OPERATOR_ROLE = "operator"


class ApiKey(SQLModel, table=True):
    __tablename__ = "api_keys"

    # sha256 of the key: a leaked database does not leak usable keys.
    key_hash: str = Field(primary_key=True, max_length=64)
    # Public handle of the key (admin routes name keys by it; it reveals nothing of the key).
    id: str = Field(unique=True, index=True, max_length=32)
    tenant: str = Field(index=True, max_length=128)
    name: str = Field(default="", max_length=64)
    role: str = Field(default=TENANT_ROLE, max_length=16)
    # The key's first characters, so a person can tell which of their keys this row is.
    prefix: str = Field(default="", max_length=8)
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    revoked_at: datetime | None = None
