from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.run_code_request_language import RunCodeRequestLanguage
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.run_code_request_files import RunCodeRequestFiles


T = TypeVar("T", bound="RunCodeRequest")


@_attrs_define
class RunCodeRequest:
    """
    Attributes:
        code (str): the code to run
        compile_timeout (float | Unset): compile timeout for compiled languages Default: 10.0.
        fetch_files (list[str] | Unset): a list of file paths to fetch after code execution
        files (RunCodeRequestFiles | Unset): a dict from file path to base64 encoded file content
        language (RunCodeRequestLanguage | Unset): the language or execution mode to run the code Default:
            RunCodeRequestLanguage.PYTHON.
        memory_limit_mb (int | Unset): verl's field: the run's memory limit (-1: the server's default) Default: -1.
        run_timeout (float | Unset): code run timeout (at most fncall's 60 s per case) Default: 10.0.
        stdin (None | str | Unset): optional string to pass into stdin
    """

    code: str
    compile_timeout: float | Unset = 10.0
    fetch_files: list[str] | Unset = UNSET
    files: RunCodeRequestFiles | Unset = UNSET
    language: RunCodeRequestLanguage | Unset = RunCodeRequestLanguage.PYTHON
    memory_limit_mb: int | Unset = -1
    run_timeout: float | Unset = 10.0
    stdin: None | str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        code = self.code

        compile_timeout = self.compile_timeout

        fetch_files: list[str] | Unset = UNSET
        if not isinstance(self.fetch_files, Unset):
            fetch_files = self.fetch_files

        files: dict[str, Any] | Unset = UNSET
        if not isinstance(self.files, Unset):
            files = self.files.to_dict()

        language: str | Unset = UNSET
        if not isinstance(self.language, Unset):
            language = self.language.value

        memory_limit_mb = self.memory_limit_mb

        run_timeout = self.run_timeout

        stdin: None | str | Unset
        if isinstance(self.stdin, Unset):
            stdin = UNSET
        else:
            stdin = self.stdin

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "code": code,
            }
        )
        if compile_timeout is not UNSET:
            field_dict["compile_timeout"] = compile_timeout
        if fetch_files is not UNSET:
            field_dict["fetch_files"] = fetch_files
        if files is not UNSET:
            field_dict["files"] = files
        if language is not UNSET:
            field_dict["language"] = language
        if memory_limit_mb is not UNSET:
            field_dict["memory_limit_MB"] = memory_limit_mb
        if run_timeout is not UNSET:
            field_dict["run_timeout"] = run_timeout
        if stdin is not UNSET:
            field_dict["stdin"] = stdin

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.run_code_request_files import RunCodeRequestFiles

        d = dict(src_dict)
        code = d.pop("code")

        compile_timeout = d.pop("compile_timeout", UNSET)

        fetch_files = cast(list[str], d.pop("fetch_files", UNSET))

        _files = d.pop("files", UNSET)
        files: RunCodeRequestFiles | Unset
        if isinstance(_files, Unset):
            files = UNSET
        else:
            files = RunCodeRequestFiles.from_dict(_files)

        _language = d.pop("language", UNSET)
        language: RunCodeRequestLanguage | Unset
        if isinstance(_language, Unset):
            language = UNSET
        else:
            language = RunCodeRequestLanguage(_language)

        memory_limit_mb = d.pop("memory_limit_MB", UNSET)

        run_timeout = d.pop("run_timeout", UNSET)

        def _parse_stdin(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        stdin = _parse_stdin(d.pop("stdin", UNSET))

        run_code_request = cls(
            code=code,
            compile_timeout=compile_timeout,
            fetch_files=fetch_files,
            files=files,
            language=language,
            memory_limit_mb=memory_limit_mb,
            run_timeout=run_timeout,
            stdin=stdin,
        )

        run_code_request.additional_properties = d
        return run_code_request

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
