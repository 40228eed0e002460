from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.command_run_status import CommandRunStatus
from ..types import UNSET, Unset

T = TypeVar("T", bound="CommandRunResult")


@_attrs_define
class CommandRunResult:
    """
    Attributes:
        status (CommandRunStatus):
        cpu_time (float | None | Unset):
        execution_time (float | None | Unset):
        return_code (int | None | Unset):
        stderr (None | str | Unset):
        stdout (None | str | Unset):
    """

    status: CommandRunStatus
    cpu_time: float | None | Unset = UNSET
    execution_time: float | None | Unset = UNSET
    return_code: int | None | Unset = UNSET
    stderr: None | str | Unset = UNSET
    stdout: None | str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        status = self.status.value

        cpu_time: float | None | Unset
        if isinstance(self.cpu_time, Unset):
            cpu_time = UNSET
        else:
            cpu_time = self.cpu_time

        execution_time: float | None | Unset
        if isinstance(self.execution_time, Unset):
            execution_time = UNSET
        else:
            execution_time = self.execution_time

        return_code: int | None | Unset
        if isinstance(self.return_code, Unset):
            return_code = UNSET
        else:
            return_code = self.return_code

        stderr: None | str | Unset
        if isinstance(self.stderr, Unset):
            stderr = UNSET
        else:
            stderr = self.stderr

        stdout: None | str | Unset
        if isinstance(self.stdout, Unset):
            stdout = UNSET
        else:
            stdout = self.stdout

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "status": status,
            }
        )
        if cpu_time is not UNSET:
            field_dict["cpu_time"] = cpu_time
        if execution_time is not UNSET:
            field_dict["execution_time"] = execution_time
        if return_code is not UNSET:
            field_dict["return_code"] = return_code
        if stderr is not UNSET:
            field_dict["stderr"] = stderr
        if stdout is not UNSET:
            field_dict["stdout"] = stdout

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        status = CommandRunStatus(d.pop("status"))

        def _parse_cpu_time(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        cpu_time = _parse_cpu_time(d.pop("cpu_time", UNSET))

        def _parse_execution_time(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        execution_time = _parse_execution_time(d.pop("execution_time", UNSET))

        def _parse_return_code(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        return_code = _parse_return_code(d.pop("return_code", UNSET))

        def _parse_stderr(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        stderr = _parse_stderr(d.pop("stderr", UNSET))

        def _parse_stdout(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        stdout = _parse_stdout(d.pop("stdout", UNSET))

        command_run_result = cls(
            status=status,
            cpu_time=cpu_time,
            execution_time=execution_time,
            return_code=return_code,
            stderr=stderr,
            stdout=stdout,
        )

        command_run_result.additional_properties = d
        return command_run_result

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
