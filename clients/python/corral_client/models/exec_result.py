from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.exec_result_encoding import ExecResultEncoding
from ..types import UNSET, Unset

T = TypeVar("T", bound="ExecResult")


@_attrs_define
class ExecResult:
    """
    Attributes:
        duration_ms (float):
        exit_code (int | None):
        stderr (str):
        stdout (str):
        encoding (ExecResultEncoding | Unset): How stdout and stderr are encoded (the request's output_encoding)
            Default: ExecResultEncoding.UTF_8.
        oom_killed (bool | Unset):  Default: False.
        timed_out (bool | Unset):  Default: False.
        truncated (bool | Unset):  Default: False.
    """

    duration_ms: float
    exit_code: int | None
    stderr: str
    stdout: str
    encoding: ExecResultEncoding | Unset = ExecResultEncoding.UTF_8
    oom_killed: bool | Unset = False
    timed_out: bool | Unset = False
    truncated: bool | Unset = False
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        duration_ms = self.duration_ms

        exit_code: int | None
        exit_code = self.exit_code

        stderr = self.stderr

        stdout = self.stdout

        encoding: str | Unset = UNSET
        if not isinstance(self.encoding, Unset):
            encoding = self.encoding.value

        oom_killed = self.oom_killed

        timed_out = self.timed_out

        truncated = self.truncated

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "duration_ms": duration_ms,
                "exit_code": exit_code,
                "stderr": stderr,
                "stdout": stdout,
            }
        )
        if encoding is not UNSET:
            field_dict["encoding"] = encoding
        if oom_killed is not UNSET:
            field_dict["oom_killed"] = oom_killed
        if timed_out is not UNSET:
            field_dict["timed_out"] = timed_out
        if truncated is not UNSET:
            field_dict["truncated"] = truncated

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        duration_ms = d.pop("duration_ms")

        def _parse_exit_code(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        exit_code = _parse_exit_code(d.pop("exit_code"))

        stderr = d.pop("stderr")

        stdout = d.pop("stdout")

        _encoding = d.pop("encoding", UNSET)
        encoding: ExecResultEncoding | Unset
        if isinstance(_encoding, Unset):
            encoding = UNSET
        else:
            encoding = ExecResultEncoding(_encoding)

        oom_killed = d.pop("oom_killed", UNSET)

        timed_out = d.pop("timed_out", UNSET)

        truncated = d.pop("truncated", UNSET)

        exec_result = cls(
            duration_ms=duration_ms,
            exit_code=exit_code,
            stderr=stderr,
            stdout=stdout,
            encoding=encoding,
            oom_killed=oom_killed,
            timed_out=timed_out,
            truncated=truncated,
        )

        exec_result.additional_properties = d
        return exec_result

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
