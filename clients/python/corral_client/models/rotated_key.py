from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="RotatedKey")


@_attrs_define
class RotatedKey:
    """
    Attributes:
        created_at (datetime.datetime):
        id (str):
        key (str): The key: shown this once, stored only as its hash
        name (str):
        prefix (str):
        replaces (str): Id of the key this one replaces (revoked now)
        revoked_at (datetime.datetime | None):
        role (str):
        tenant (str):
    """

    created_at: datetime.datetime
    id: str
    key: str
    name: str
    prefix: str
    replaces: str
    revoked_at: datetime.datetime | None
    role: str
    tenant: str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        created_at = self.created_at.isoformat()

        id = self.id

        key = self.key

        name = self.name

        prefix = self.prefix

        replaces = self.replaces

        revoked_at: None | str
        if isinstance(self.revoked_at, datetime.datetime):
            revoked_at = self.revoked_at.isoformat()
        else:
            revoked_at = self.revoked_at

        role = self.role

        tenant = self.tenant

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "created_at": created_at,
                "id": id,
                "key": key,
                "name": name,
                "prefix": prefix,
                "replaces": replaces,
                "revoked_at": revoked_at,
                "role": role,
                "tenant": tenant,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        created_at = datetime.datetime.fromisoformat(d.pop("created_at"))

        id = d.pop("id")

        key = d.pop("key")

        name = d.pop("name")

        prefix = d.pop("prefix")

        replaces = d.pop("replaces")

        def _parse_revoked_at(data: object) -> datetime.datetime | None:
            if data is None:
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                revoked_at_type_0 = datetime.datetime.fromisoformat(data)

                return revoked_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None, data)

        revoked_at = _parse_revoked_at(d.pop("revoked_at"))

        role = d.pop("role")

        tenant = d.pop("tenant")

        rotated_key = cls(
            created_at=created_at,
            id=id,
            key=key,
            name=name,
            prefix=prefix,
            replaces=replaces,
            revoked_at=revoked_at,
            role=role,
            tenant=tenant,
        )

        rotated_key.additional_properties = d
        return rotated_key

    @property
    def additional_keys(self) -> list[str]:
        return list(self.additional_properties.keys())

    def __getitem__(self, key: str) -> Any:
        return self.additional_properties[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.additional_properties[key] = value

    def __delitem__(self, key: str) -> None:
        del self.additional_properties[key]

    def __contains__(self, key: str) -> bool:
        return key in self.additional_properties
