"""Corral input events → QMP `input-send-event` events (QKeyCode names, absolute pointer)."""

from typing import Any

from corral_common.contracts.display import InputEvent, KeyPress, MouseClick, MouseMove, TypeText
from corral_node_agent.errors import BadInput

# QMP absolute axes run 0..0x7fff whatever the screen size.
ABS_MAX = 0x7FFF

_NAMED = {
    " ": "spc", "\n": "ret", "\t": "tab", "-": "minus", "=": "equal", "[": "bracket_left",
    "]": "bracket_right", "\\": "backslash", ";": "semicolon", "'": "apostrophe", "`": "grave_accent",
    ",": "comma", ".": "dot", "/": "slash",
}
_SHIFTED = {
    "!": "1", "@": "2", "#": "3", "$": "4", "%": "5", "^": "6", "&": "7", "*": "8", "(": "9", ")": "0",
    "_": "minus", "+": "equal", "{": "bracket_left", "}": "bracket_right", "|": "backslash",
    ":": "semicolon", '"': "apostrophe", "~": "grave_accent", "<": "comma", ">": "dot", "?": "slash",
}
# Friendly aliases for names users type; anything else must be a QKeyCode name.
_ALIASES = {"enter": "ret", "return": "ret", "space": "spc", "escape": "esc", "control": "ctrl",
            "del": "delete", "pageup": "pgup", "pagedown": "pgdn", "win": "meta_l", "super": "meta_l"}


def _key(qcode: str, down: bool) -> dict[str, Any]:
    return {"type": "key", "data": {"down": down, "key": {"type": "qcode", "data": qcode}}}


def _chord(qcodes: list[str]) -> list[dict[str, Any]]:
    return [_key(k, True) for k in qcodes] + [_key(k, False) for k in reversed(qcodes)]


def char_qcodes(ch: str) -> list[str]:
    """The keys a US keyboard presses together to type ch."""
    if ch.isascii() and ch.isalpha():
        return ["shift", ch.lower()] if ch.isupper() else [ch]
    if ch.isascii() and ch.isdigit():
        return [ch]
    if ch in _NAMED:
        return [_NAMED[ch]]
    if ch in _SHIFTED:
        return ["shift", _SHIFTED[ch]]
    raise BadInput(f"cannot type {ch!r}: only printable ASCII, newline and tab", loc=["body", "events"])


def key_name(name: str) -> str:
    name = name.strip().lower()
    return _ALIASES.get(name, name)


def to_qmp(events: list[InputEvent], screen: tuple[int, int]) -> list[list[dict[str, Any]]]:
    """Batches of QMP events, one batch per `input-send-event` call (a key chord or a click
    must arrive together; separate characters go separately so the guest sees each one)."""
    width, height = max(1, screen[0]), max(1, screen[1])

    def move(x: int, y: int) -> list[dict[str, Any]]:
        return [{"type": "abs", "data": {"axis": "x", "value": min(ABS_MAX, x * ABS_MAX // max(1, width - 1))}},
                {"type": "abs", "data": {"axis": "y", "value": min(ABS_MAX, y * ABS_MAX // max(1, height - 1))}}]

    batches: list[list[dict[str, Any]]] = []
    for event in events:
        if isinstance(event, KeyPress):
            batches.append(_chord([key_name(k) for k in event.keys]))
        elif isinstance(event, TypeText):
            batches.extend(_chord(char_qcodes(ch)) for ch in event.text)
        elif isinstance(event, MouseMove):
            batches.append(move(event.x, event.y))
        elif isinstance(event, MouseClick):
            batch = move(event.x, event.y) if event.x is not None and event.y is not None else []
            for _ in range(2 if event.double else 1):
                batch += [{"type": "btn", "data": {"down": True, "button": event.button}},
                          {"type": "btn", "data": {"down": False, "button": event.button}}]
            batches.append(batch)
    return batches
