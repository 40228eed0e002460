from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.key_press import KeyPress
    from ..models.mouse_click import MouseClick
    from ..models.mouse_move import MouseMove
    from ..models.type_text import TypeText


T = TypeVar("T", bound="InputRequest")


@_attrs_define
class InputRequest:
    """Body of ``POST /v1/sandboxes/{id}/input``: events are sent in order.

    Attributes:
        events (list[KeyPress | MouseClick | MouseMove | TypeText]):
    """

    events: list[KeyPress | MouseClick | MouseMove | TypeText]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.key_press import KeyPress
        from ..models.mouse_move import MouseMove
        from ..models.type_text import TypeText

        events = []
        for events_item_data in self.events:
            events_item: dict[str, Any]
            if (
                isinstance(events_item_data, KeyPress)
                or isinstance(events_item_data, TypeText)
                or isinstance(events_item_data, MouseMove)
            ):
                events_item = events_item_data.to_dict()
            else:
                events_item = events_item_data.to_dict()

            events.append(events_item)

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "events": events,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.key_press import KeyPress
        from ..models.mouse_click import MouseClick
        from ..models.mouse_move import MouseMove
        from ..models.type_text import TypeText

        d = dict(src_dict)
        events = []
        _events = d.pop("events")
        for events_item_data in _events:

            def _parse_events_item(
                data: object,
            ) -> KeyPress | MouseClick | MouseMove | TypeText:
                try:
                    if not isinstance(data, dict):
                        raise TypeError()
                    events_item_type_0 = KeyPress.from_dict(data)

                    return events_item_type_0
                except (TypeError, ValueError, AttributeError, KeyError):
                    pass
                try:
                    if not isinstance(data, dict):
                        raise TypeError()
                    events_item_type_1 = TypeText.from_dict(data)

                    return events_item_type_1
                except (TypeError, ValueError, AttributeError, KeyError):
                    pass
                try:
                    if not isinstance(data, dict):
                        raise TypeError()
                    events_item_type_2 = MouseMove.from_dict(data)

                    return events_item_type_2
                except (TypeError, ValueError, AttributeError, KeyError):
                    pass
                if not isinstance(data, dict):
                    raise TypeError()
                events_item_type_3 = MouseClick.from_dict(data)

                return events_item_type_3

            events_item = _parse_events_item(events_item_data)

            events.append(events_item)

        input_request = cls(
            events=events,
        )

        input_request.additional_properties = d
        return input_request

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
