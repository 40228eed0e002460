from datetime import UTC, datetime

from sqlmodel import Field, SQLModel


class ApiKey(SQLModel, table=True):
    __tablename__ = "api_keys"

    # sha256 of the key: a leaked database does not leak usable keys.
    key_hash: str = Field(primary_key=True, max_length=64)
    tenant: str = Field(index=True, max_length=128)
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
