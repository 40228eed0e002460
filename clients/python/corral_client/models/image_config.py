from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.image_config_env import ImageConfigEnv
    from ..models.image_config_labels import ImageConfigLabels


T = TypeVar("T", bound="ImageConfig")


@_attrs_define
class ImageConfig:
    """What a sandbox of an environment starts with (an OCI image's config, or given when the
    environment is made): defaults of every exec, each overridable per sandbox and per exec.
    image-service stores it with the environment; the api applies it at create.

        Attributes:
            cmd (list[str] | Unset):
            cwd (None | str | Unset): Working directory of execs (absolute)
            entrypoint (list[str] | Unset):
            env (ImageConfigEnv | Unset): Environment variables (PATH...)
            exposed_ports (list[str] | Unset):
            labels (ImageConfigLabels | Unset):
            user (None | str | Unset): uid[:gid] execs run as inside the sandbox (user names resolved at import)
    """

    cmd: list[str] | Unset = UNSET
    cwd: None | str | Unset = UNSET
    entrypoint: list[str] | Unset = UNSET
    env: ImageConfigEnv | Unset = UNSET
    exposed_ports: list[str] | Unset = UNSET
    labels: ImageConfigLabels | Unset = UNSET
    user: None | str | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        cmd: list[str] | Unset = UNSET
        if not isinstance(self.cmd, Unset):
            cmd = self.cmd

        cwd: None | str | Unset
        if isinstance(self.cwd, Unset):
            cwd = UNSET
        else:
            cwd = self.cwd

        entrypoint: list[str] | Unset = UNSET
        if not isinstance(self.entrypoint, Unset):
            entrypoint = self.entrypoint

        env: dict[str, Any] | Unset = UNSET
        if not isinstance(self.env, Unset):
            env = self.env.to_dict()

        exposed_ports: list[str] | Unset = UNSET
        if not isinstance(self.exposed_ports, Unset):
            exposed_ports = self.exposed_ports

        labels: dict[str, Any] | Unset = UNSET
        if not isinstance(self.labels, Unset):
            labels = self.labels.to_dict()

        user: None | str | Unset
        if isinstance(self.user, Unset):
            user = UNSET
        else:
            user = self.user

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if cmd is not UNSET:
            field_dict["cmd"] = cmd
        if cwd is not UNSET:
            field_dict["cwd"] = cwd
        if entrypoint is not UNSET:
            field_dict["entrypoint"] = entrypoint
        if env is not UNSET:
            field_dict["env"] = env
        if exposed_ports is not UNSET:
            field_dict["exposed_ports"] = exposed_ports
        if labels is not UNSET:
            field_dict["labels"] = labels
        if user is not UNSET:
            field_dict["user"] = user

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.image_config_env import ImageConfigEnv
        from ..models.image_config_labels import ImageConfigLabels

        d = dict(src_dict)
        cmd = cast(list[str], d.pop("cmd", UNSET))

        def _parse_cwd(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        cwd = _parse_cwd(d.pop("cwd", UNSET))

        entrypoint = cast(list[str], d.pop("entrypoint", UNSET))

        _env = d.pop("env", UNSET)
        env: ImageConfigEnv | Unset
        if isinstance(_env, Unset):
            env = UNSET
        else:
            env = ImageConfigEnv.from_dict(_env)

        exposed_ports = cast(list[str], d.pop("exposed_ports", UNSET))

        _labels = d.pop("labels", UNSET)
        labels: ImageConfigLabels | Unset
        if isinstance(_labels, Unset):
            labels = UNSET
        else:
            labels = ImageConfigLabels.from_dict(_labels)

        def _parse_user(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        user = _parse_user(d.pop("user", UNSET))

        image_config = cls(
            cmd=cmd,
            cwd=cwd,
            entrypoint=entrypoint,
            env=env,
            exposed_ports=exposed_ports,
            labels=labels,
            user=user,
        )

        return image_config
