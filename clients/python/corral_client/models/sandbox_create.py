from __future__ import annotations

from collections.abc import Mapping
from typing import (
    TYPE_CHECKING,
    Any,
    Literal,
    Self,
    TypeVar,
    cast,
)

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.sandbox_create_backend import SandboxCreateBackend
from ..models.sandbox_create_isolation import SandboxCreateIsolation
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.network_policy import NetworkPolicy
    from ..models.requests import Requests
    from ..models.sandbox_create_env import SandboxCreateEnv
    from ..models.sandbox_create_labels import SandboxCreateLabels


T = TypeVar("T", bound="SandboxCreate")


@_attrs_define
class SandboxCreate:
    """Request body of ``POST /v1/sandboxes`` (and the spec of a job or a rollout).

    ``environment`` and ``disk_image`` are names as image-service registers them (lowercase
    letters, digits, '.', '_' and '-'; a disk image may add ``:version``), else 422
    ``invalid_name``; one it does not know is 422 ``unknown_environment`` /
    ``unknown_disk_image``. ``env`` values must not contain NUL (422 ``invalid_text``).

        Attributes:
            backend (SandboxCreateBackend | Unset): Sandbox kind; 'auto' is resolved at creation (see isolation, display)
                Default: SandboxCreateBackend.AUTO.
            cpu (float | Unset): CPU cores (cgroup quota) Default: 1.0.
            disk_image (None | str | Unset): Boot this disk image (image-service name[:version]) instead of layers
            disk_mb (int | Unset): Size of the writable upper layer Default: 1024.
            display (bool | Unset): A screen with keyboard and mouse (auto picks vm) Default: False.
            env (SandboxCreateEnv | Unset):
            environment (str | Unset): Environment name (image-service); not needed with disk_image or from_snapshot
                Default: ''.
            from_snapshot (None | str | Unset): Restore this snapshot as a new sandbox
            isolation (SandboxCreateIsolation | Unset): 'vm' asks for a hardware boundary (auto picks microvm); once
                resolved, what the kind gives: 'vm' for microvm and vm Default: SandboxCreateIsolation.CONTAINER.
            labels (SandboxCreateLabels | Unset):
            memory_mb (int | Unset):  Default: 256.
            network (Literal['none'] | NetworkPolicy | Unset): 'none' (no network device at all) or an allowlist:
                docs/network.md Default: 'none'.
            pids_limit (int | Unset):  Default: 512.
            requests (Requests | Unset): What placement counts for a sandbox (Kubernetes' requests): the scheduler reserves
                these
                on a node, and the node's measured use keeps it honest (docs/architecture.md, "Capacity").
                The spec's cpu, memory_mb, disk_mb and pids_limit are its limits, which the node enforces;
                a request is at most its limit. Unset, each is the default for the sandbox's kind
                (``default_requests``), never above the limit.
            run_as (None | str | Unset): uid[:gid] that execs as 'user' run as (containers with a user namespace)
            timeout_s (int | Unset): Wall-clock lifetime; the sandbox is ended after it Default: 3600.
            workdir (None | str | Unset): Default working dir of execs
    """

    backend: SandboxCreateBackend | Unset = SandboxCreateBackend.AUTO
    cpu: float | Unset = 1.0
    disk_image: None | str | Unset = UNSET
    disk_mb: int | Unset = 1024
    display: bool | Unset = False
    env: SandboxCreateEnv | Unset = UNSET
    environment: str | Unset = ""
    from_snapshot: None | str | Unset = UNSET
    isolation: SandboxCreateIsolation | Unset = SandboxCreateIsolation.CONTAINER
    labels: SandboxCreateLabels | Unset = UNSET
    memory_mb: int | Unset = 256
    network: Literal["none"] | NetworkPolicy | Unset = "none"
    pids_limit: int | Unset = 512
    requests: Requests | Unset = UNSET
    run_as: None | str | Unset = UNSET
    timeout_s: int | Unset = 3600
    workdir: None | str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.network_policy import NetworkPolicy

        backend: str | Unset = UNSET
        if not isinstance(self.backend, Unset):
            backend = self.backend.value

        cpu = self.cpu

        disk_image: None | str | Unset
        if isinstance(self.disk_image, Unset):
            disk_image = UNSET
        else:
            disk_image = self.disk_image

        disk_mb = self.disk_mb

        display = self.display

        env: dict[str, Any] | Unset = UNSET
        if not isinstance(self.env, Unset):
            env = self.env.to_dict()

        environment = self.environment

        from_snapshot: None | str | Unset
        if isinstance(self.from_snapshot, Unset):
            from_snapshot = UNSET
        else:
            from_snapshot = self.from_snapshot

        isolation: str | Unset = UNSET
        if not isinstance(self.isolation, Unset):
            isolation = self.isolation.value

        labels: dict[str, Any] | Unset = UNSET
        if not isinstance(self.labels, Unset):
            labels = self.labels.to_dict()

        memory_mb = self.memory_mb

        network: dict[str, Any] | Literal["none"] | Unset
        if isinstance(self.network, Unset):
            network = UNSET
        elif isinstance(self.network, NetworkPolicy):
            network = self.network.to_dict()
        else:
            network = self.network

        pids_limit = self.pids_limit

        requests: dict[str, Any] | Unset = UNSET
        if not isinstance(self.requests, Unset):
            requests = self.requests.to_dict()

        run_as: None | str | Unset
        if isinstance(self.run_as, Unset):
            run_as = UNSET
        else:
            run_as = self.run_as

        timeout_s = self.timeout_s

        workdir: None | str | Unset
        if isinstance(self.workdir, Unset):
            workdir = UNSET
        else:
            workdir = self.workdir

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({})
        if backend is not UNSET:
            field_dict["backend"] = backend
        if cpu is not UNSET:
            field_dict["cpu"] = cpu
        if disk_image is not UNSET:
            field_dict["disk_image"] = disk_image
        if disk_mb is not UNSET:
            field_dict["disk_mb"] = disk_mb
        if display is not UNSET:
            field_dict["display"] = display
        if env is not UNSET:
            field_dict["env"] = env
        if environment is not UNSET:
            field_dict["environment"] = environment
        if from_snapshot is not UNSET:
            field_dict["from_snapshot"] = from_snapshot
        if isolation is not UNSET:
            field_dict["isolation"] = isolation
        if labels is not UNSET:
            field_dict["labels"] = labels
        if memory_mb is not UNSET:
            field_dict["memory_mb"] = memory_mb
        if network is not UNSET:
            field_dict["network"] = network
        if pids_limit is not UNSET:
            field_dict["pids_limit"] = pids_limit
        if requests is not UNSET:
            field_dict["requests"] = requests
        if run_as is not UNSET:
            field_dict["run_as"] = run_as
        if timeout_s is not UNSET:
            field_dict["timeout_s"] = timeout_s
        if workdir is not UNSET:
            field_dict["workdir"] = workdir

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.network_policy import NetworkPolicy
        from ..models.requests import Requests
        from ..models.sandbox_create_env import SandboxCreateEnv
        from ..models.sandbox_create_labels import SandboxCreateLabels

        d = dict(src_dict)
        _backend = d.pop("backend", UNSET)
        backend: SandboxCreateBackend | Unset
        if isinstance(_backend, Unset):
            backend = UNSET
        else:
            backend = SandboxCreateBackend(_backend)

        cpu = d.pop("cpu", UNSET)

        def _parse_disk_image(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        disk_image = _parse_disk_image(d.pop("disk_image", UNSET))

        disk_mb = d.pop("disk_mb", UNSET)

        display = d.pop("display", UNSET)

        _env = d.pop("env", UNSET)
        env: SandboxCreateEnv | Unset
        if isinstance(_env, Unset):
            env = UNSET
        else:
            env = SandboxCreateEnv.from_dict(_env)

        environment = d.pop("environment", UNSET)

        def _parse_from_snapshot(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        from_snapshot = _parse_from_snapshot(d.pop("from_snapshot", UNSET))

        _isolation = d.pop("isolation", UNSET)
        isolation: SandboxCreateIsolation | Unset
        if isinstance(_isolation, Unset):
            isolation = UNSET
        else:
            isolation = SandboxCreateIsolation(_isolation)

        _labels = d.pop("labels", UNSET)
        labels: SandboxCreateLabels | Unset
        if isinstance(_labels, Unset):
            labels = UNSET
        else:
            labels = SandboxCreateLabels.from_dict(_labels)

        memory_mb = d.pop("memory_mb", UNSET)

        def _parse_network(data: object) -> Literal["none"] | NetworkPolicy | Unset:
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                network_type_0 = NetworkPolicy.from_dict(data)

                return network_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            network_type_1 = cast(Literal["none"], data)
            if network_type_1 != "none":
                raise ValueError(
                    f"network_type_1 must match const 'none', got '{network_type_1}'"
                )
            return network_type_1

        network = _parse_network(d.pop("network", UNSET))

        pids_limit = d.pop("pids_limit", UNSET)

        _requests = d.pop("requests", UNSET)
        requests: Requests | Unset
        if isinstance(_requests, Unset):
            requests = UNSET
        else:
            requests = Requests.from_dict(_requests)

        def _parse_run_as(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        run_as = _parse_run_as(d.pop("run_as", UNSET))

        timeout_s = d.pop("timeout_s", UNSET)

        def _parse_workdir(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        workdir = _parse_workdir(d.pop("workdir", UNSET))

        sandbox_create = cls(
            backend=backend,
            cpu=cpu,
            disk_image=disk_image,
            disk_mb=disk_mb,
            display=display,
            env=env,
            environment=environment,
            from_snapshot=from_snapshot,
            isolation=isolation,
            labels=labels,
            memory_mb=memory_mb,
            network=network,
            pids_limit=pids_limit,
            requests=requests,
            run_as=run_as,
            timeout_s=timeout_s,
            workdir=workdir,
        )

        sandbox_create.additional_properties = d
        return sandbox_create

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
