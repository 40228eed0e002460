from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.verdict import Verdict
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.case_result import CaseResult
    from ..models.compile_result import CompileResult


T = TypeVar("T", bound="FncallResponse")


@_attrs_define
class FncallResponse:
    """
    Attributes:
        id (str):
        runtime (str):
        verdict (Verdict):
        cases (list[CaseResult] | Unset):
        compile_ (CompileResult | None | Unset):
        latency_ms (float | Unset): Time in the api, queueing included Default: 0.0.
        message (str | Unset):  Default: ''.
        node_id (str | Unset):  Default: ''.
    """

    id: str
    runtime: str
    verdict: Verdict
    cases: list[CaseResult] | Unset = UNSET
    compile_: CompileResult | None | Unset = UNSET
    latency_ms: float | Unset = 0.0
    message: str | Unset = ""
    node_id: str | Unset = ""
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.compile_result import CompileResult

        id = self.id

        runtime = self.runtime

        verdict = self.verdict.value

        cases: list[dict[str, Any]] | Unset = UNSET
        if not isinstance(self.cases, Unset):
            cases = []
            for cases_item_data in self.cases:
                cases_item = cases_item_data.to_dict()
                cases.append(cases_item)

        compile_: dict[str, Any] | None | Unset
        if isinstance(self.compile_, Unset):
            compile_ = UNSET
        elif isinstance(self.compile_, CompileResult):
            compile_ = self.compile_.to_dict()
        else:
            compile_ = self.compile_

        latency_ms = self.latency_ms

        message = self.message

        node_id = self.node_id

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "id": id,
                "runtime": runtime,
                "verdict": verdict,
            }
        )
        if cases is not UNSET:
            field_dict["cases"] = cases
        if compile_ is not UNSET:
            field_dict["compile"] = compile_
        if latency_ms is not UNSET:
            field_dict["latency_ms"] = latency_ms
        if message is not UNSET:
            field_dict["message"] = message
        if node_id is not UNSET:
            field_dict["node_id"] = node_id

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.case_result import CaseResult
        from ..models.compile_result import CompileResult

        d = dict(src_dict)
        id = d.pop("id")

        runtime = d.pop("runtime")

        verdict = Verdict(d.pop("verdict"))

        _cases = d.pop("cases", UNSET)
        cases: list[CaseResult] | Unset = UNSET
        if _cases is not UNSET:
            cases = []
            for cases_item_data in _cases:
                cases_item = CaseResult.from_dict(cases_item_data)

                cases.append(cases_item)

        def _parse_compile_(data: object) -> CompileResult | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                compile_type_0 = CompileResult.from_dict(data)

                return compile_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(CompileResult | None | Unset, data)

        compile_ = _parse_compile_(d.pop("compile", UNSET))

        latency_ms = d.pop("latency_ms", UNSET)

        message = d.pop("message", UNSET)

        node_id = d.pop("node_id", UNSET)

        fncall_response = cls(
            id=id,
            runtime=runtime,
            verdict=verdict,
            cases=cases,
            compile_=compile_,
            latency_ms=latency_ms,
            message=message,
            node_id=node_id,
        )

        fncall_response.additional_properties = d
        return fncall_response

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
