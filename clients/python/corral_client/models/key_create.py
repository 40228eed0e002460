from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define

from ..models.key_create_role import KeyCreateRole
from ..types import UNSET, Unset

T = TypeVar("T", bound="KeyCreate")


@_attrs_define
class KeyCreate:
    """
    Attributes:
        tenant (str):
        name (str | Unset):  Default: ''.
        role (KeyCreateRole | Unset):  Default: KeyCreateRole.TENANT.
    """

    tenant: str
    name: str | Unset = ""
    role: KeyCreateRole | Unset = KeyCreateRole.TENANT

    def to_dict(self) -> dict[str, Any]:
        tenant = self.tenant

        name = self.name

        role: str | Unset = UNSET
        if not isinstance(self.role, Unset):
            role = self.role.value

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "tenant": tenant,
            }
        )
        if name is not UNSET:
            field_dict["name"] = name
        if role is not UNSET:
            field_dict["role"] = role

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        tenant = d.pop("tenant")

        name = d.pop("name", UNSET)

        _role = d.pop("role", UNSET)
        role: KeyCreateRole | Unset
        if isinstance(_role, Unset):
            role = UNSET
        else:
            role = KeyCreateRole(_role)

        key_create = cls(
            tenant=tenant,
            name=name,
            role=role,
        )

        return key_create
