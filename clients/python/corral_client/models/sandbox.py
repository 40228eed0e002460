from __future__ import annotations

import datetime
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

from ..models.sandbox_state import SandboxState
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.network_policy import NetworkPolicy
    from ..models.requests import Requests
    from ..models.sandbox_labels import SandboxLabels
    from ..models.sandbox_runtime import SandboxRuntime
    from ..models.usage import Usage


T = TypeVar("T", bound="Sandbox")


@_attrs_define
class Sandbox:
    """
    Attributes:
        backend (str): The resolved kind: container, microvm or vm
        cpu (float):
        created_at (datetime.datetime):
        disk_mb (int):
        environment (str):
        id (str):
        memory_mb (int):
        state (SandboxState):
        timeout_s (int):
        disk_image (None | str | Unset):
        display (bool | Unset):  Default: False.
        ended_at (datetime.datetime | None | Unset):
        error (None | str | Unset): Why it failed, in words (reason is the code): a failed start's message, what no node
            has for it, how its node was lost
        from_snapshot (None | str | Unset):
        isolation (str | Unset):  Default: 'container'.
        labels (SandboxLabels | Unset):
        network (Literal['none'] | NetworkPolicy | Unset):  Default: 'none'.
        node_id (None | str | Unset):
        pids_limit (int | None | Unset):
        reason (None | str | Unset):
        requests (None | Requests | Unset):
        runtime (SandboxRuntime | Unset):
        started_at (datetime.datetime | None | Unset):
        usage (None | Unset | Usage):
    """

    backend: str
    cpu: float
    created_at: datetime.datetime
    disk_mb: int
    environment: str
    id: str
    memory_mb: int
    state: SandboxState
    timeout_s: int
    disk_image: None | str | Unset = UNSET
    display: bool | Unset = False
    ended_at: datetime.datetime | None | Unset = UNSET
    error: None | str | Unset = UNSET
    from_snapshot: None | str | Unset = UNSET
    isolation: str | Unset = "container"
    labels: SandboxLabels | Unset = UNSET
    network: Literal["none"] | NetworkPolicy | Unset = "none"
    node_id: None | str | Unset = UNSET
    pids_limit: int | None | Unset = UNSET
    reason: None | str | Unset = UNSET
    requests: None | Requests | Unset = UNSET
    runtime: SandboxRuntime | Unset = UNSET
    started_at: datetime.datetime | None | Unset = UNSET
    usage: None | Unset | Usage = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.network_policy import NetworkPolicy
        from ..models.requests import Requests
        from ..models.usage import Usage

        backend = self.backend

        cpu = self.cpu

        created_at = self.created_at.isoformat()

        disk_mb = self.disk_mb

        environment = self.environment

        id = self.id

        memory_mb = self.memory_mb

        state = self.state.value

        timeout_s = self.timeout_s

        disk_image: None | str | Unset
        if isinstance(self.disk_image, Unset):
            disk_image = UNSET
        else:
            disk_image = self.disk_image

        display = self.display

        ended_at: None | str | Unset
        if isinstance(self.ended_at, Unset):
            ended_at = UNSET
        elif isinstance(self.ended_at, datetime.datetime):
            ended_at = self.ended_at.isoformat()
        else:
            ended_at = self.ended_at

        error: None | str | Unset
        if isinstance(self.error, Unset):
            error = UNSET
        else:
            error = self.error

        from_snapshot: None | str | Unset
        if isinstance(self.from_snapshot, Unset):
            from_snapshot = UNSET
        else:
            from_snapshot = self.from_snapshot

        isolation = self.isolation

        labels: dict[str, Any] | Unset = UNSET
        if not isinstance(self.labels, Unset):
            labels = self.labels.to_dict()

        network: dict[str, Any] | Literal["none"] | Unset
        if isinstance(self.network, Unset):
            network = UNSET
        elif isinstance(self.network, NetworkPolicy):
            network = self.network.to_dict()
        else:
            network = self.network

        node_id: None | str | Unset
        if isinstance(self.node_id, Unset):
            node_id = UNSET
        else:
            node_id = self.node_id

        pids_limit: int | None | Unset
        if isinstance(self.pids_limit, Unset):
            pids_limit = UNSET
        else:
            pids_limit = self.pids_limit

        reason: None | str | Unset
        if isinstance(self.reason, Unset):
            reason = UNSET
        else:
            reason = self.reason

        requests: dict[str, Any] | None | Unset
        if isinstance(self.requests, Unset):
            requests = UNSET
        elif isinstance(self.requests, Requests):
            requests = self.requests.to_dict()
        else:
            requests = self.requests

        runtime: dict[str, Any] | Unset = UNSET
        if not isinstance(self.runtime, Unset):
            runtime = self.runtime.to_dict()

        started_at: None | str | Unset
        if isinstance(self.started_at, Unset):
            started_at = UNSET
        elif isinstance(self.started_at, datetime.datetime):
            started_at = self.started_at.isoformat()
        else:
            started_at = self.started_at

        usage: dict[str, Any] | None | Unset
        if isinstance(self.usage, Unset):
            usage = UNSET
        elif isinstance(self.usage, Usage):
            usage = self.usage.to_dict()
        else:
            usage = self.usage

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "backend": backend,
                "cpu": cpu,
                "created_at": created_at,
                "disk_mb": disk_mb,
                "environment": environment,
                "id": id,
                "memory_mb": memory_mb,
                "state": state,
                "timeout_s": timeout_s,
            }
        )
        if disk_image is not UNSET:
            field_dict["disk_image"] = disk_image
        if display is not UNSET:
            field_dict["display"] = display
        if ended_at is not UNSET:
            field_dict["ended_at"] = ended_at
        if error is not UNSET:
            field_dict["error"] = error
        if from_snapshot is not UNSET:
            field_dict["from_snapshot"] = from_snapshot
        if isolation is not UNSET:
            field_dict["isolation"] = isolation
        if labels is not UNSET:
            field_dict["labels"] = labels
        if network is not UNSET:
            field_dict["network"] = network
        if node_id is not UNSET:
            field_dict["node_id"] = node_id
        if pids_limit is not UNSET:
            field_dict["pids_limit"] = pids_limit
        if reason is not UNSET:
            field_dict["reason"] = reason
        if requests is not UNSET:
            field_dict["requests"] = requests
        if runtime is not UNSET:
            field_dict["runtime"] = runtime
        if started_at is not UNSET:
            field_dict["started_at"] = started_at
        if usage is not UNSET:
            field_dict["usage"] = usage

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.network_policy import NetworkPolicy
        from ..models.requests import Requests
        from ..models.sandbox_labels import SandboxLabels
        from ..models.sandbox_runtime import SandboxRuntime
        from ..models.usage import Usage

        d = dict(src_dict)
        backend = d.pop("backend")

        cpu = d.pop("cpu")

        created_at = datetime.datetime.fromisoformat(d.pop("created_at"))

        disk_mb = d.pop("disk_mb")

        environment = d.pop("environment")

        id = d.pop("id")

        memory_mb = d.pop("memory_mb")

        state = SandboxState(d.pop("state"))

        timeout_s = d.pop("timeout_s")

        def _parse_disk_image(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        disk_image = _parse_disk_image(d.pop("disk_image", UNSET))

        display = d.pop("display", UNSET)

        def _parse_ended_at(data: object) -> datetime.datetime | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                ended_at_type_0 = datetime.datetime.fromisoformat(data)

                return ended_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None | Unset, data)

        ended_at = _parse_ended_at(d.pop("ended_at", UNSET))

        def _parse_error(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        error = _parse_error(d.pop("error", UNSET))

        def _parse_from_snapshot(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        from_snapshot = _parse_from_snapshot(d.pop("from_snapshot", UNSET))

        isolation = d.pop("isolation", UNSET)

        _labels = d.pop("labels", UNSET)
        labels: SandboxLabels | Unset
        if isinstance(_labels, Unset):
            labels = UNSET
        else:
            labels = SandboxLabels.from_dict(_labels)

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

        def _parse_node_id(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        node_id = _parse_node_id(d.pop("node_id", UNSET))

        def _parse_pids_limit(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        pids_limit = _parse_pids_limit(d.pop("pids_limit", UNSET))

        def _parse_reason(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        reason = _parse_reason(d.pop("reason", UNSET))

        def _parse_requests(data: object) -> None | Requests | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                requests_type_0 = Requests.from_dict(data)

                return requests_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | Requests | Unset, data)

        requests = _parse_requests(d.pop("requests", UNSET))

        _runtime = d.pop("runtime", UNSET)
        runtime: SandboxRuntime | Unset
        if isinstance(_runtime, Unset):
            runtime = UNSET
        else:
            runtime = SandboxRuntime.from_dict(_runtime)

        def _parse_started_at(data: object) -> datetime.datetime | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                started_at_type_0 = datetime.datetime.fromisoformat(data)

                return started_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None | Unset, data)

        started_at = _parse_started_at(d.pop("started_at", UNSET))

        def _parse_usage(data: object) -> None | Unset | Usage:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                usage_type_0 = Usage.from_dict(data)

                return usage_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | Unset | Usage, data)

        usage = _parse_usage(d.pop("usage", UNSET))

        sandbox = cls(
            backend=backend,
            cpu=cpu,
            created_at=created_at,
            disk_mb=disk_mb,
            environment=environment,
            id=id,
            memory_mb=memory_mb,
            state=state,
            timeout_s=timeout_s,
            disk_image=disk_image,
            display=display,
            ended_at=ended_at,
            error=error,
            from_snapshot=from_snapshot,
            isolation=isolation,
            labels=labels,
            network=network,
            node_id=node_id,
            pids_limit=pids_limit,
            reason=reason,
            requests=requests,
            runtime=runtime,
            started_at=started_at,
            usage=usage,
        )

        sandbox.additional_properties = d
        return sandbox

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
