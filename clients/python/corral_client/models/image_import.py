from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.image_import_state import ImageImportState
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.import_failure import ImportFailure
    from ..models.import_progress import ImportProgress
    from ..models.import_result import ImportResult


T = TypeVar("T", bound="ImageImport")


@_attrs_define
class ImageImport:
    """
    Attributes:
        created_at (datetime.datetime):
        id (str):
        name (str):
        progress (ImportProgress):
        state (ImageImportState):
        updated_at (datetime.datetime):
        version (str):
        error (ImportFailure | None | Unset):
        result (ImportResult | None | Unset):
    """

    created_at: datetime.datetime
    id: str
    name: str
    progress: ImportProgress
    state: ImageImportState
    updated_at: datetime.datetime
    version: str
    error: ImportFailure | None | Unset = UNSET
    result: ImportResult | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.import_failure import ImportFailure
        from ..models.import_result import ImportResult

        created_at = self.created_at.isoformat()

        id = self.id

        name = self.name

        progress = self.progress.to_dict()

        state = self.state.value

        updated_at = self.updated_at.isoformat()

        version = self.version

        error: dict[str, Any] | None | Unset
        if isinstance(self.error, Unset):
            error = UNSET
        elif isinstance(self.error, ImportFailure):
            error = self.error.to_dict()
        else:
            error = self.error

        result: dict[str, Any] | None | Unset
        if isinstance(self.result, Unset):
            result = UNSET
        elif isinstance(self.result, ImportResult):
            result = self.result.to_dict()
        else:
            result = self.result

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "created_at": created_at,
                "id": id,
                "name": name,
                "progress": progress,
                "state": state,
                "updated_at": updated_at,
                "version": version,
            }
        )
        if error is not UNSET:
            field_dict["error"] = error
        if result is not UNSET:
            field_dict["result"] = result

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.import_failure import ImportFailure
        from ..models.import_progress import ImportProgress
        from ..models.import_result import ImportResult

        d = dict(src_dict)
        created_at = datetime.datetime.fromisoformat(d.pop("created_at"))

        id = d.pop("id")

        name = d.pop("name")

        progress = ImportProgress.from_dict(d.pop("progress"))

        state = ImageImportState(d.pop("state"))

        updated_at = datetime.datetime.fromisoformat(d.pop("updated_at"))

        version = d.pop("version")

        def _parse_error(data: object) -> ImportFailure | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                error_type_0 = ImportFailure.from_dict(data)

                return error_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(ImportFailure | None | Unset, data)

        error = _parse_error(d.pop("error", UNSET))

        def _parse_result(data: object) -> ImportResult | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                result_type_0 = ImportResult.from_dict(data)

                return result_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(ImportResult | None | Unset, data)

        result = _parse_result(d.pop("result", UNSET))

        image_import = cls(
            created_at=created_at,
            id=id,
            name=name,
            progress=progress,
            state=state,
            updated_at=updated_at,
            version=version,
            error=error,
            result=result,
        )

        image_import.additional_properties = d
        return image_import

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
