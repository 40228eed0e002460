from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.verdict import Verdict
from ..types import UNSET, Unset

T = TypeVar("T", bound="CompileResult")


@_attrs_define
class CompileResult:
    """
    Attributes:
        verdict (Verdict):
        exit_code (int | None | Unset):
        stderr (str | Unset):  Default: ''.
        stdout (str | Unset):  Default: ''.
        time_ms (float | Unset):  Default: 0.0.
        wall_ms (float | Unset):  Default: 0.0.
    """

    verdict: Verdict
    exit_code: int | None | Unset = UNSET
    stderr: str | Unset = ""
    stdout: str | Unset = ""
    time_ms: float | Unset = 0.0
    wall_ms: float | Unset = 0.0
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        verdict = self.verdict.value

        exit_code: int | None | Unset
        if isinstance(self.exit_code, Unset):
            exit_code = UNSET
        else:
            exit_code = self.exit_code

        stderr = self.stderr

        stdout = self.stdout

        time_ms = self.time_ms

        wall_ms = self.wall_ms

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "verdict": verdict,
            }
        )
        if exit_code is not UNSET:
            field_dict["exit_code"] = exit_code
        if stderr is not UNSET:
            field_dict["stderr"] = stderr
        if stdout is not UNSET:
            field_dict["stdout"] = stdout
        if time_ms is not UNSET:
            field_dict["time_ms"] = time_ms
        if wall_ms is not UNSET:
            field_dict["wall_ms"] = wall_ms

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        verdict = Verdict(d.pop("verdict"))

        def _parse_exit_code(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        exit_code = _parse_exit_code(d.pop("exit_code", UNSET))

        stderr = d.pop("stderr", UNSET)

        stdout = d.pop("stdout", UNSET)

        time_ms = d.pop("time_ms", UNSET)

        wall_ms = d.pop("wall_ms", UNSET)

        compile_result = cls(
            verdict=verdict,
            exit_code=exit_code,
            stderr=stderr,
            stdout=stdout,
            time_ms=time_ms,
            wall_ms=wall_ms,
        )

        compile_result.additional_properties = d
        return compile_result

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
