"""Pieces shared by the sync and async SDK classes."""

import json
import os
from dataclasses import dataclass
from typing import Any

from corral_client.models import ExecRequest, ExecResult, SandboxCreate

DEFAULT_URL = "http://127.0.0.1:8000"


def resolve(url: str | None, api_key: str | None) -> tuple[str, str]:
    url = url or os.environ.get("CORRAL_URL") or DEFAULT_URL
    api_key = api_key or os.environ.get("CORRAL_API_KEY") or ""
    if not api_key:
        raise ValueError("an API key is required: Corral(url, api_key) or CORRAL_API_KEY")
    return url.rstrip("/"), api_key


def create_body(environment: str, *, backend: str = "auto", cpu: float = 1.0, memory_mb: int = 256,
                disk_mb: int = 1024, timeout_s: int = 3600, pids_limit: int = 512,
                env: dict[str, str] | None = None, labels: dict[str, str] | None = None) -> SandboxCreate:
    return SandboxCreate.from_dict({
        "environment": environment, "backend": backend, "cpu": cpu, "memory_mb": memory_mb, "disk_mb": disk_mb,
        "timeout_s": timeout_s, "pids_limit": pids_limit, "env": env or {}, "labels": labels or {},
    })


def exec_body(cmd: list[str] | str, *, cwd: str | None = None, env: dict[str, str] | None = None,
              stdin: str | None = None, timeout_s: float = 60.0, output_limit: int | None = None,
              user: str = "user") -> ExecRequest:
    body = {"cmd": cmd, "cwd": cwd, "env": env or {}, "stdin": stdin, "timeout_s": timeout_s,
            "output_limit": output_limit, "user": user}
    return ExecRequest.from_dict({k: v for k, v in body.items() if v is not None})


@dataclass
class ExecChunk:
    type: str
    data: str | None = None
    result: ExecResult | None = None

    @classmethod
    def from_line(cls, line: str) -> "ExecChunk":
        raw: dict[str, Any] = json.loads(line)
        result = ExecResult.from_dict(raw["result"]) if raw.get("result") else None
        return cls(type=raw["type"], data=raw.get("data"), result=result)


def label_selectors(labels: dict[str, str] | None) -> list[str]:
    return [f"{k}={v}" for k, v in (labels or {}).items()]
