"""The SDK's errors, and ``raise_for``: the one mapping from an error answer to ``CorralError``.

Every call (``corral._calls.Call.result``, the streaming transports) goes through ``raise_for``
before its answer is parsed, so a 4xx/5xx is always a ``CorralError`` with the api's code,
message and details, and an answer that is not the api's JSON error (a proxy's 502 page)
becomes code ``error`` with the start of its text.
"""

import json
from typing import Any


class CorralError(Exception):
    """An error answer from Corral: HTTP status, machine-readable code, message, field details."""

    def __init__(self, status: int, code: str, message: str, details: list[dict[str, Any]] | None = None):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details or []


class SandboxFailed(CorralError):
    """The sandbox ended in ``failed`` (or ended) while the caller waited for it to run."""

    def __init__(self, sandbox_id: str, state: str, reason: str | None, error: str | None = None):
        said = ": ".join(s for s in (reason, error) if s)
        super().__init__(409, "sandbox_failed", f"sandbox {sandbox_id} is {state}" + (f" ({said})" if said else ""))
        self.sandbox_id = sandbox_id
        self.state = state
        self.reason = reason
        self.error = error  # why, in words (reason is the code)


def raise_for(status: int, content: bytes) -> None:
    if status < 400:
        return
    try:
        error = json.loads(content).get("error", {})
        raise CorralError(status, error.get("code", "error"), error.get("message", ""), error.get("details"))
    except (ValueError, AttributeError):
        raise CorralError(status, "error", content.decode(errors="replace")[:500]) from None
