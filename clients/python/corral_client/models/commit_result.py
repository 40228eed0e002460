from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.environment import Environment
    from ..models.layer import Layer


T = TypeVar("T", bound="CommitResult")


@_attrs_define
class CommitResult:
    """
    Attributes:
        layer (Layer):
        environment (Environment | None | Unset):
    """

    layer: Layer
    environment: Environment | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.environment import Environment

        layer = self.layer.to_dict()

        environment: dict[str, Any] | None | Unset
        if isinstance(self.environment, Unset):
            environment = UNSET
        elif isinstance(self.environment, Environment):
            environment = self.environment.to_dict()
        else:
            environment = self.environment

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "layer": layer,
            }
        )
        if environment is not UNSET:
            field_dict["environment"] = environment

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.environment import Environment
        from ..models.layer import Layer

        d = dict(src_dict)
        layer = Layer.from_dict(d.pop("layer"))

        def _parse_environment(data: object) -> Environment | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                environment_type_0 = Environment.from_dict(data)

                return environment_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(Environment | None | Unset, data)

        environment = _parse_environment(d.pop("environment", UNSET))

        commit_result = cls(
            layer=layer,
            environment=environment,
        )

        commit_result.additional_properties = d
        return commit_result

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
