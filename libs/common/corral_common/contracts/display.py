"""Screens, input and snapshots: what the `vm` backend adds to the sandbox API (the api ↔
node-agent data path; the public snapshot record is the api's, corral_api.snapshots.schemas)."""

from typing import Annotated, Literal

from pydantic import BaseModel, Field


class KeyPress(BaseModel):
    """Press keys together, then release them (a chord: ["ctrl", "alt", "delete"]).
    Names are QEMU QKeyCode names: "a", "1", "ret", "spc", "esc", "tab", "backspace",
    "ctrl", "shift", "alt", "up", "f1"..."""

    type: Literal["key"] = "key"
    keys: list[str] = Field(min_length=1, max_length=8)


class TypeText(BaseModel):
    """Type text as a US keyboard would (ASCII printable, newline, tab)."""

    type: Literal["text"] = "text"
    text: str = Field(min_length=1, max_length=4096)


class MouseMove(BaseModel):
    """Move the pointer to an absolute position in screen pixels."""

    type: Literal["mouse_move"] = "mouse_move"
    x: int = Field(ge=0, le=16384)
    y: int = Field(ge=0, le=16384)


class MouseClick(BaseModel):
    """Click a button, at (x, y) when given (else where the pointer is)."""

    type: Literal["click"] = "click"
    button: Literal["left", "right", "middle"] = "left"
    x: int | None = Field(None, ge=0, le=16384)
    y: int | None = Field(None, ge=0, le=16384)
    double: bool = False


InputEvent = Annotated[KeyPress | TypeText | MouseMove | MouseClick, Field(discriminator="type")]


class InputRequest(BaseModel):
    """Body of ``POST /v1/sandboxes/{id}/input``: events are sent in order."""

    events: list[InputEvent] = Field(min_length=1, max_length=256)



class InputSent(BaseModel):
    """A node-agent's answer to ``POST /v1/sandboxes/{id}/input``."""

    sent: int  # events sent to the screen, all of the request's


class SnapshotRequest(BaseModel):
    """Body of a node-agent's ``POST /v1/sandboxes/{id}/snapshot``: the api names the snapshot."""

    snapshot_id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class SnapshotSaved(BaseModel):
    """A node-agent's answer to a snapshot request: the state is on its disk."""

    size_bytes: int
