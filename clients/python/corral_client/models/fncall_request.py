from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.fncall_request_files import FncallRequestFiles
    from ..models.test_case import TestCase


T = TypeVar("T", bound="FncallRequest")


@_attrs_define
class FncallRequest:
    """
    Attributes:
        code (str):
        runtime (str): One of python, cpp, c, bash, pytest, go, java, nodejs, typescript, rust, ruby, php, lua, perl
            (GET /v1/fncall/runtimes)
        compare (str | Unset): exact | tokens | float:<eps> (absolute or relative error) Default: 'exact'.
        files (FncallRequestFiles | Unset): Extra files in the working dir: relative path -> base64 content
        memory_limit_mb (int | Unset): Memory (RSS + tmpfs, no swap) per case Default: 256.
        output_limit_kb (int | Unset): stdout (and stderr) per case Default: 1024.
        stdin (None | str | Unset): stdin of the single run when `tests` is omitted
        stop_on_failure (bool | Unset): Skip the remaining cases after the first failing one Default: False.
        tests (list[TestCase] | None | Unset): Run once per case (compile once); omit for one run
        time_limit_ms (int | Unset): CPU time per case (all processes) Default: 2000.
    """

    code: str
    runtime: str
    compare: str | Unset = "exact"
    files: FncallRequestFiles | Unset = UNSET
    memory_limit_mb: int | Unset = 256
    output_limit_kb: int | Unset = 1024
    stdin: None | str | Unset = UNSET
    stop_on_failure: bool | Unset = False
    tests: list[TestCase] | None | Unset = UNSET
    time_limit_ms: int | Unset = 2000
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        code = self.code

        runtime = self.runtime

        compare = self.compare

        files: dict[str, Any] | Unset = UNSET
        if not isinstance(self.files, Unset):
            files = self.files.to_dict()

        memory_limit_mb = self.memory_limit_mb

        output_limit_kb = self.output_limit_kb

        stdin: None | str | Unset
        if isinstance(self.stdin, Unset):
            stdin = UNSET
        else:
            stdin = self.stdin

        stop_on_failure = self.stop_on_failure

        tests: list[dict[str, Any]] | None | Unset
        if isinstance(self.tests, Unset):
            tests = UNSET
        elif isinstance(self.tests, list):
            tests = []
            for tests_type_0_item_data in self.tests:
                tests_type_0_item = tests_type_0_item_data.to_dict()
                tests.append(tests_type_0_item)

        else:
            tests = self.tests

        time_limit_ms = self.time_limit_ms

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "code": code,
                "runtime": runtime,
            }
        )
        if compare is not UNSET:
            field_dict["compare"] = compare
        if files is not UNSET:
            field_dict["files"] = files
        if memory_limit_mb is not UNSET:
            field_dict["memory_limit_mb"] = memory_limit_mb
        if output_limit_kb is not UNSET:
            field_dict["output_limit_kb"] = output_limit_kb
        if stdin is not UNSET:
            field_dict["stdin"] = stdin
        if stop_on_failure is not UNSET:
            field_dict["stop_on_failure"] = stop_on_failure
        if tests is not UNSET:
            field_dict["tests"] = tests
        if time_limit_ms is not UNSET:
            field_dict["time_limit_ms"] = time_limit_ms

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.fncall_request_files import FncallRequestFiles
        from ..models.test_case import TestCase

        d = dict(src_dict)
        code = d.pop("code")

        runtime = d.pop("runtime")

        compare = d.pop("compare", UNSET)

        _files = d.pop("files", UNSET)
        files: FncallRequestFiles | Unset
        if isinstance(_files, Unset):
            files = UNSET
        else:
            files = FncallRequestFiles.from_dict(_files)

        memory_limit_mb = d.pop("memory_limit_mb", UNSET)

        output_limit_kb = d.pop("output_limit_kb", UNSET)

        def _parse_stdin(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        stdin = _parse_stdin(d.pop("stdin", UNSET))

        stop_on_failure = d.pop("stop_on_failure", UNSET)

        def _parse_tests(data: object) -> list[TestCase] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                tests_type_0 = []
                _tests_type_0 = data
                for tests_type_0_item_data in _tests_type_0:
                    tests_type_0_item = TestCase.from_dict(tests_type_0_item_data)

                    tests_type_0.append(tests_type_0_item)

                return tests_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[TestCase] | None | Unset, data)

        tests = _parse_tests(d.pop("tests", UNSET))

        time_limit_ms = d.pop("time_limit_ms", UNSET)

        fncall_request = cls(
            code=code,
            runtime=runtime,
            compare=compare,
            files=files,
            memory_limit_mb=memory_limit_mb,
            output_limit_kb=output_limit_kb,
            stdin=stdin,
            stop_on_failure=stop_on_failure,
            tests=tests,
            time_limit_ms=time_limit_ms,
        )

        fncall_request.additional_properties = d
        return fncall_request

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
