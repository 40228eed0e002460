from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.job_counts import JobCounts
    from ..models.job_labels import JobLabels


T = TypeVar("T", bound="Job")


@_attrs_define
class Job:
    """
    Attributes:
        admitted (int): Sandboxes placed on a node so far
        count (int):
        created_at (float):
        deleted (bool):
        id (str):
        labels (JobLabels):
        pending (int): Sandboxes still queued
        priority (int):
        submitted (int): Sandbox records created and queued so far
        weight (float):
        counts (JobCounts | Unset): Sandboxes per state
        queue_position (int | None | Unset): 0: this job is admitted next; null when nothing is queued
        waiting_reason (None | str | Unset): Why its next queued sandbox waits (which resource, on which nodes); null
            when nothing waits for room
    """

    admitted: int
    count: int
    created_at: float
    deleted: bool
    id: str
    labels: JobLabels
    pending: int
    priority: int
    submitted: int
    weight: float
    counts: JobCounts | Unset = UNSET
    queue_position: int | None | Unset = UNSET
    waiting_reason: None | str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        admitted = self.admitted

        count = self.count

        created_at = self.created_at

        deleted = self.deleted

        id = self.id

        labels = self.labels.to_dict()

        pending = self.pending

        priority = self.priority

        submitted = self.submitted

        weight = self.weight

        counts: dict[str, Any] | Unset = UNSET
        if not isinstance(self.counts, Unset):
            counts = self.counts.to_dict()

        queue_position: int | None | Unset
        if isinstance(self.queue_position, Unset):
            queue_position = UNSET
        else:
            queue_position = self.queue_position

        waiting_reason: None | str | Unset
        if isinstance(self.waiting_reason, Unset):
            waiting_reason = UNSET
        else:
            waiting_reason = self.waiting_reason

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "admitted": admitted,
                "count": count,
                "created_at": created_at,
                "deleted": deleted,
                "id": id,
                "labels": labels,
                "pending": pending,
                "priority": priority,
                "submitted": submitted,
                "weight": weight,
            }
        )
        if counts is not UNSET:
            field_dict["counts"] = counts
        if queue_position is not UNSET:
            field_dict["queue_position"] = queue_position
        if waiting_reason is not UNSET:
            field_dict["waiting_reason"] = waiting_reason

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.job_counts import JobCounts
        from ..models.job_labels import JobLabels

        d = dict(src_dict)
        admitted = d.pop("admitted")

        count = d.pop("count")

        created_at = d.pop("created_at")

        deleted = d.pop("deleted")

        id = d.pop("id")

        labels = JobLabels.from_dict(d.pop("labels"))

        pending = d.pop("pending")

        priority = d.pop("priority")

        submitted = d.pop("submitted")

        weight = d.pop("weight")

        _counts = d.pop("counts", UNSET)
        counts: JobCounts | Unset
        if isinstance(_counts, Unset):
            counts = UNSET
        else:
            counts = JobCounts.from_dict(_counts)

        def _parse_queue_position(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        queue_position = _parse_queue_position(d.pop("queue_position", UNSET))

        def _parse_waiting_reason(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        waiting_reason = _parse_waiting_reason(d.pop("waiting_reason", UNSET))

        job = cls(
            admitted=admitted,
            count=count,
            created_at=created_at,
            deleted=deleted,
            id=id,
            labels=labels,
            pending=pending,
            priority=priority,
            submitted=submitted,
            weight=weight,
            counts=counts,
            queue_position=queue_position,
            waiting_reason=waiting_reason,
        )

        job.additional_properties = d
        return job

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
