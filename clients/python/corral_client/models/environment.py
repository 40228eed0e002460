from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.environment_layer import EnvironmentLayer
    from ..models.image_config import ImageConfig


T = TypeVar("T", bound="Environment")


@_attrs_define
class Environment:
    """
    Attributes:
        base (str):
        created_at (datetime.datetime):
        layers (list[EnvironmentLayer]): Mount order: base first, the top layer last
        name (str):
        shared (bool):
        config (ImageConfig | None | Unset):
        diffs (list[str] | Unset):
        toolkit (None | str | Unset):
        workspace (None | str | Unset):
    """

    base: str
    created_at: datetime.datetime
    layers: list[EnvironmentLayer]
    name: str
    shared: bool
    config: ImageConfig | None | Unset = UNSET
    diffs: list[str] | Unset = UNSET
    toolkit: None | str | Unset = UNSET
    workspace: None | str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.image_config import ImageConfig

        base = self.base

        created_at = self.created_at.isoformat()

        layers = []
        for layers_item_data in self.layers:
            layers_item = layers_item_data.to_dict()
            layers.append(layers_item)

        name = self.name

        shared = self.shared

        config: dict[str, Any] | None | Unset
        if isinstance(self.config, Unset):
            config = UNSET
        elif isinstance(self.config, ImageConfig):
            config = self.config.to_dict()
        else:
            config = self.config

        diffs: list[str] | Unset = UNSET
        if not isinstance(self.diffs, Unset):
            diffs = self.diffs

        toolkit: None | str | Unset
        if isinstance(self.toolkit, Unset):
            toolkit = UNSET
        else:
            toolkit = self.toolkit

        workspace: None | str | Unset
        if isinstance(self.workspace, Unset):
            workspace = UNSET
        else:
            workspace = self.workspace

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "base": base,
                "created_at": created_at,
                "layers": layers,
                "name": name,
                "shared": shared,
            }
        )
        if config is not UNSET:
            field_dict["config"] = config
        if diffs is not UNSET:
            field_dict["diffs"] = diffs
        if toolkit is not UNSET:
            field_dict["toolkit"] = toolkit
        if workspace is not UNSET:
            field_dict["workspace"] = workspace

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.environment_layer import EnvironmentLayer
        from ..models.image_config import ImageConfig

        d = dict(src_dict)
        base = d.pop("base")

        created_at = datetime.datetime.fromisoformat(d.pop("created_at"))

        layers = []
        _layers = d.pop("layers")
        for layers_item_data in _layers:
            layers_item = EnvironmentLayer.from_dict(layers_item_data)

            layers.append(layers_item)

        name = d.pop("name")

        shared = d.pop("shared")

        def _parse_config(data: object) -> ImageConfig | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                config_type_0 = ImageConfig.from_dict(data)

                return config_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(ImageConfig | None | Unset, data)

        config = _parse_config(d.pop("config", UNSET))

        diffs = cast(list[str], d.pop("diffs", UNSET))

        def _parse_toolkit(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        toolkit = _parse_toolkit(d.pop("toolkit", UNSET))

        def _parse_workspace(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        workspace = _parse_workspace(d.pop("workspace", UNSET))

        environment = cls(
            base=base,
            created_at=created_at,
            layers=layers,
            name=name,
            shared=shared,
            config=config,
            diffs=diffs,
            toolkit=toolkit,
            workspace=workspace,
        )

        environment.additional_properties = d
        return environment

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
