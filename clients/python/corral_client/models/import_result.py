from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.image_config import ImageConfig
    from ..models.import_result_timings import ImportResultTimings


T = TypeVar("T", bound="ImportResult")


@_attrs_define
class ImportResult:
    """
    Attributes:
        config (ImageConfig): What a sandbox of an environment starts with (an OCI image's config, or given when the
            environment is made): defaults of every exec, each overridable per sandbox and per exec.
            image-service stores it with the environment; the api applies it at create.
        digests (list[str]):
        environment (str):
        format_ (str): oci-layout | docker-archive
        layers (list[str]): name:version of the layers made, base first
        source_layers (int):
        timings (ImportResultTimings | Unset): Seconds per step: pull, unpack, build, register
    """

    config: ImageConfig
    digests: list[str]
    environment: str
    format_: str
    layers: list[str]
    source_layers: int
    timings: ImportResultTimings | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        config = self.config.to_dict()

        digests = self.digests

        environment = self.environment

        format_ = self.format_

        layers = self.layers

        source_layers = self.source_layers

        timings: dict[str, Any] | Unset = UNSET
        if not isinstance(self.timings, Unset):
            timings = self.timings.to_dict()

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "config": config,
                "digests": digests,
                "environment": environment,
                "format": format_,
                "layers": layers,
                "source_layers": source_layers,
            }
        )
        if timings is not UNSET:
            field_dict["timings"] = timings

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.image_config import ImageConfig
        from ..models.import_result_timings import ImportResultTimings

        d = dict(src_dict)
        config = ImageConfig.from_dict(d.pop("config"))

        digests = cast(list[str], d.pop("digests"))

        environment = d.pop("environment")

        format_ = d.pop("format")

        layers = cast(list[str], d.pop("layers"))

        source_layers = d.pop("source_layers")

        _timings = d.pop("timings", UNSET)
        timings: ImportResultTimings | Unset
        if isinstance(_timings, Unset):
            timings = UNSET
        else:
            timings = ImportResultTimings.from_dict(_timings)

        import_result = cls(
            config=config,
            digests=digests,
            environment=environment,
            format_=format_,
            layers=layers,
            source_layers=source_layers,
            timings=timings,
        )

        import_result.additional_properties = d
        return import_result

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
