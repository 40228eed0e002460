from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.exec_request_output_encoding import ExecRequestOutputEncoding
from ..models.exec_request_user import ExecRequestUser
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.exec_request_env import ExecRequestEnv


T = TypeVar("T", bound="ExecRequest")


@_attrs_define
class ExecRequest:
    """
    Attributes:
        cmd (list[str] | str): argv list, or a shell string run with /bin/sh -c
        cwd (None | str | Unset): Working directory (default: the user's home)
        env (ExecRequestEnv | Unset):
        output_encoding (ExecRequestOutputEncoding | Unset): How stdout/stderr come back: utf-8 text (invalid bytes
            become U+FFFD) or base64 of the raw bytes; output_limit counts raw bytes either way Default:
            ExecRequestOutputEncoding.UTF_8.
        output_limit (int | Unset): Bytes kept per stream; beyond it output is dropped and truncated=true Default:
            1048576.
        stdin (None | str | Unset): Text fed to the command's standard input
        timeout_s (float | Unset):  Default: 60.0.
        user (ExecRequestUser | Unset):  Default: ExecRequestUser.USER.
    """

    cmd: list[str] | str
    cwd: None | str | Unset = UNSET
    env: ExecRequestEnv | Unset = UNSET
    output_encoding: ExecRequestOutputEncoding | Unset = ExecRequestOutputEncoding.UTF_8
    output_limit: int | Unset = 1048576
    stdin: None | str | Unset = UNSET
    timeout_s: float | Unset = 60.0
    user: ExecRequestUser | Unset = ExecRequestUser.USER
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        cmd: list[str] | str
        if isinstance(self.cmd, list):
            cmd = self.cmd

        else:
            cmd = self.cmd

        cwd: None | str | Unset
        if isinstance(self.cwd, Unset):
            cwd = UNSET
        else:
            cwd = self.cwd

        env: dict[str, Any] | Unset = UNSET
        if not isinstance(self.env, Unset):
            env = self.env.to_dict()

        output_encoding: str | Unset = UNSET
        if not isinstance(self.output_encoding, Unset):
            output_encoding = self.output_encoding.value

        output_limit = self.output_limit

        stdin: None | str | Unset
        if isinstance(self.stdin, Unset):
            stdin = UNSET
        else:
            stdin = self.stdin

        timeout_s = self.timeout_s

        user: str | Unset = UNSET
        if not isinstance(self.user, Unset):
            user = self.user.value

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "cmd": cmd,
            }
        )
        if cwd is not UNSET:
            field_dict["cwd"] = cwd
        if env is not UNSET:
            field_dict["env"] = env
        if output_encoding is not UNSET:
            field_dict["output_encoding"] = output_encoding
        if output_limit is not UNSET:
            field_dict["output_limit"] = output_limit
        if stdin is not UNSET:
            field_dict["stdin"] = stdin
        if timeout_s is not UNSET:
            field_dict["timeout_s"] = timeout_s
        if user is not UNSET:
            field_dict["user"] = user

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.exec_request_env import ExecRequestEnv

        d = dict(src_dict)

        def _parse_cmd(data: object) -> list[str] | str:
            try:
                if not isinstance(data, list):
                    raise TypeError()
                cmd_type_0 = cast(list[str], data)

                return cmd_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[str] | str, data)

        cmd = _parse_cmd(d.pop("cmd"))

        def _parse_cwd(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        cwd = _parse_cwd(d.pop("cwd", UNSET))

        _env = d.pop("env", UNSET)
        env: ExecRequestEnv | Unset
        if isinstance(_env, Unset):
            env = UNSET
        else:
            env = ExecRequestEnv.from_dict(_env)

        _output_encoding = d.pop("output_encoding", UNSET)
        output_encoding: ExecRequestOutputEncoding | Unset
        if isinstance(_output_encoding, Unset):
            output_encoding = UNSET
        else:
            output_encoding = ExecRequestOutputEncoding(_output_encoding)

        output_limit = d.pop("output_limit", UNSET)

        def _parse_stdin(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        stdin = _parse_stdin(d.pop("stdin", UNSET))

        timeout_s = d.pop("timeout_s", UNSET)

        _user = d.pop("user", UNSET)
        user: ExecRequestUser | Unset
        if isinstance(_user, Unset):
            user = UNSET
        else:
            user = ExecRequestUser(_user)

        exec_request = cls(
            cmd=cmd,
            cwd=cwd,
            env=env,
            output_encoding=output_encoding,
            output_limit=output_limit,
            stdin=stdin,
            timeout_s=timeout_s,
            user=user,
        )

        exec_request.additional_properties = d
        return exec_request

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
