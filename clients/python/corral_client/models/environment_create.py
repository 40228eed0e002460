from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.image_config import ImageConfig


T = TypeVar("T", bound="EnvironmentCreate")


@_attrs_define
class EnvironmentCreate:
    """A named combination of layers (yours or the shared catalogue's; your own shadow a
    shared one of the same name:version), and what its sandboxes start with.

        Attributes:
            base (str): name:version of a base layer
            name (str):
            config (ImageConfig | None | Unset):
            diffs (list[str] | Unset): name:version of diff layers (commits) above the toolkit, lowest first
            toolkit (None | str | Unset):
            workspace (None | str | Unset):
    """

    base: str
    name: str
    config: ImageConfig | None | Unset = UNSET
    diffs: list[str] | Unset = UNSET
    toolkit: None | str | Unset = UNSET
    workspace: None | str | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        from ..models.image_config import ImageConfig

        base = self.base

        name = self.name

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

        field_dict.update(
            {
                "base": base,
                "name": name,
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
        from ..models.image_config import ImageConfig

        d = dict(src_dict)
        base = d.pop("base")

        name = d.pop("name")

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

        environment_create = cls(
            base=base,
            name=name,
            config=config,
            diffs=diffs,
            toolkit=toolkit,
            workspace=workspace,
        )

        return environment_create
