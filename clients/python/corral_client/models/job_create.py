from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.job_create_labels import JobCreateLabels
    from ..models.sandbox_create import SandboxCreate


T = TypeVar("T", bound="JobCreate")


@_attrs_define
class JobCreate:
    """Request body of ``POST /v1/jobs``: ``count`` sandboxes of one spec.

    Attributes:
        count (int): Sandboxes to run, at most 32000
        spec (SandboxCreate): Request body of ``POST /v1/sandboxes`` (and the spec of a job or a rollout).

            ``environment`` and ``disk_image`` are names as image-service registers them (lowercase
            letters, digits, '.', '_' and '-'; a disk image may add ``:version``), else 422
            ``invalid_name``; one it does not know is 422 ``unknown_environment`` /
            ``unknown_disk_image``. ``env`` values must not contain NUL (422 ``invalid_text``).
        labels (JobCreateLabels | Unset): Added to every sandbox (plus job=<id>)
        priority (int | Unset): Higher is admitted first; weight shares within a priority Default: 0.
        weight (float | Unset): Share of admissions relative to concurrent jobs Default: 1.0.
    """

    count: int
    spec: SandboxCreate
    labels: JobCreateLabels | Unset = UNSET
    priority: int | Unset = 0
    weight: float | Unset = 1.0
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        count = self.count

        spec = self.spec.to_dict()

        labels: dict[str, Any] | Unset = UNSET
        if not isinstance(self.labels, Unset):
            labels = self.labels.to_dict()

        priority = self.priority

        weight = self.weight

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "count": count,
                "spec": spec,
            }
        )
        if labels is not UNSET:
            field_dict["labels"] = labels
        if priority is not UNSET:
            field_dict["priority"] = priority
        if weight is not UNSET:
            field_dict["weight"] = weight

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.job_create_labels import JobCreateLabels
        from ..models.sandbox_create import SandboxCreate

        d = dict(src_dict)
        count = d.pop("count")

        spec = SandboxCreate.from_dict(d.pop("spec"))

        _labels = d.pop("labels", UNSET)
        labels: JobCreateLabels | Unset
        if isinstance(_labels, Unset):
            labels = UNSET
        else:
            labels = JobCreateLabels.from_dict(_labels)

        priority = d.pop("priority", UNSET)

        weight = d.pop("weight", UNSET)

        job_create = cls(
            count=count,
            spec=spec,
            labels=labels,
            priority=priority,
            weight=weight,
        )

        job_create.additional_properties = d
        return job_create

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
