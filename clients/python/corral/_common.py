"""Pieces shared by the sync and async SDK classes."""

import base64
import json
import os
from dataclasses import dataclass
from typing import Any

import httpx
from attrs import define

from corral_client import AuthenticatedClient
from corral_client.models import ExecRequest, SandboxCreate
from corral_client.models import ExecResult as _GeneratedExecResult

DEFAULT_URL = "http://127.0.0.1:8000"


def resolve(url: str | None, api_key: str | None) -> tuple[str, str]:
    url = url or os.environ.get("CORRAL_URL") or DEFAULT_URL
    api_key = api_key or os.environ.get("CORRAL_API_KEY") or ""
    if not api_key:
        raise ValueError("an API key is required: Corral(url, api_key) or CORRAL_API_KEY")
    return url.rstrip("/"), api_key


def connect(url: str | None, api_key: str | None, timeout: float) -> AuthenticatedClient:
    """The generated client ``Corral`` and ``AsyncCorral`` send through (its httpx clients carry the key)."""
    url, api_key = resolve(url, api_key)
    return AuthenticatedClient(base_url=url, token=api_key, timeout=httpx.Timeout(timeout, connect=10.0))


def create_body(environment: str | None = None, *, backend: str | None = None, isolation: str | None = None,
                display: bool | None = None, disk_image: str | None = None, from_snapshot: str | None = None,
                cpu: float | None = None, memory_mb: int | None = None, disk_mb: int | None = None,
                timeout_s: int | None = None, pids_limit: int | None = None,
                env: dict[str, str] | None = None, labels: dict[str, str] | None = None,
                network: str | dict[str, Any] | None = None, workdir: str | None = None,
                run_as: str | None = None, requests: dict[str, Any] | None = None) -> SandboxCreate:
    """Only what the caller gave is sent; the api fills in its defaults. That matters for
    ``from_snapshot``: a restored sandbox takes its kind, image, cpu and memory from the
    snapshot, and a field sent with another value is refused. ``network``: "none" (the
    default) or an allowlist, e.g. ``{"presets": ["pypi"], "allow": ["git.example.org:443"]}``
    (docs/network.md). ``cpu``, ``memory_mb``, ``disk_mb`` and ``pids_limit`` are limits;
    ``requests`` (``{"cpu", "memory_mb", "disk_mb", "pids"}``, each optional) is what placement
    counts, by default what an idle sandbox uses."""
    fields = {"environment": environment, "backend": backend, "isolation": isolation, "display": display,
              "disk_image": disk_image, "from_snapshot": from_snapshot, "cpu": cpu, "memory_mb": memory_mb,
              "disk_mb": disk_mb, "timeout_s": timeout_s, "pids_limit": pids_limit, "env": env, "labels": labels,
              "network": network, "workdir": workdir, "run_as": run_as, "requests": requests}
    return SandboxCreate.from_dict({k: v for k, v in fields.items() if v is not None})


def exec_body(cmd: list[str] | str, *, cwd: str | None = None, env: dict[str, str] | None = None,
              stdin: str | None = None, timeout_s: float = 60.0, output_limit: int | None = None,
              user: str = "user", output_encoding: str | None = None) -> ExecRequest:
    """``output_encoding="base64"``: stdout/stderr come back as base64 of the raw bytes (read
    them with ``result.stdout_bytes``); the default, utf-8, turns invalid bytes into U+FFFD."""
    body = {"cmd": cmd, "cwd": cwd, "env": env or {}, "stdin": stdin, "timeout_s": timeout_s,
            "output_limit": output_limit, "user": user, "output_encoding": output_encoding}
    return ExecRequest.from_dict({k: v for k, v in body.items() if v is not None})


def output_bytes(text: str, encoding: object) -> bytes:
    """Exec output as bytes: base64 decoded, else the text's UTF-8 (an api that predates
    ``encoding`` sends none: text)."""
    return base64.b64decode(text) if encoding == "base64" else text.encode()


@define
class ExecResult(_GeneratedExecResult):
    """The generated ExecResult, plus the output as bytes whatever its ``encoding``."""

    @property
    def stdout_bytes(self) -> bytes:
        return output_bytes(self.stdout, self.encoding)

    @property
    def stderr_bytes(self) -> bytes:
        return output_bytes(self.stderr, self.encoding)


@dataclass
class ExecChunk:
    type: str
    data: str | None = None
    result: ExecResult | None = None
    encoding: str | None = None  # of `data`: "utf-8" or "base64" (each base64 chunk decodes on its own)

    @property
    def data_bytes(self) -> bytes | None:
        return None if self.data is None else output_bytes(self.data, self.encoding)

    @classmethod
    def from_line(cls, line: str) -> "ExecChunk":
        raw: dict[str, Any] = json.loads(line)
        # A timed-out command has no exit code: servers before the exit chunk carried its
        # result whole left ``exit_code`` out instead of sending null.
        result = ExecResult.from_dict({"exit_code": None, **raw["result"]}) if raw.get("result") else None
        return cls(type=raw["type"], data=raw.get("data"), result=result, encoding=raw.get("encoding"))


def label_selectors(labels: dict[str, str] | None) -> list[str]:
    return [f"{k}={v}" for k, v in (labels or {}).items()]


# ---- input events for `vm` sandboxes (QEMU key names: "a", "ret", "ctrl", "f1"...) ----------

def key_event(*keys: str) -> dict[str, Any]:
    """Press these keys together, then release them: key_event("ctrl", "alt", "delete")."""
    return {"type": "key", "keys": list(keys)}


def text_event(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def move_event(x: int, y: int) -> dict[str, Any]:
    return {"type": "mouse_move", "x": x, "y": y}


def click_event(x: int | None = None, y: int | None = None, button: str = "left", double: bool = False) -> dict[str, Any]:
    event: dict[str, Any] = {"type": "click", "button": button, "double": double}
    if x is not None:
        event["x"] = x
    if y is not None:
        event["y"] = y
    return event


def input_body(events: Any) -> dict[str, Any]:
    """An InputRequest body from event dicts (see key_event...) or generated models."""
    items = [e.to_dict() if hasattr(e, "to_dict") else dict(e) for e in events]
    return {"events": items}
