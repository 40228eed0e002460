from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="SwerexToken")


@_attrs_define
class SwerexToken:
    """What ``swerex.runtime.remote.RemoteRuntime(host=url, port=None, auth_token=token)`` needs.

    Attributes:
        rollout_id (str): The rollout whose step log records this runtime's requests
        token (str): X-API-Key for this sandbox's runtime only; shown once
        url (str): The runtime's base URL (host=url, port=None)
    """

    rollout_id: str
    token: str
    url: str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        rollout_id = self.rollout_id

        token = self.token

        url = self.url

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "rollout_id": rollout_id,
                "token": token,
                "url": url,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        rollout_id = d.pop("rollout_id")

        token = d.pop("token")

        url = d.pop("url")

        swerex_token = cls(
            rollout_id=rollout_id,
            token=token,
            url=url,
        )

        swerex_token.additional_properties = d
        return swerex_token

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
