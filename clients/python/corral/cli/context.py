"""What every command shares: the client, output (human tables or one JSON document) and errors.

Exit codes (docs/cli.md):

    0  success
    1  the api answered an error (its JSON error is printed on stderr)
    2  bad usage: an unknown option, a missing or malformed argument
    3  the api could not be reached (connection refused, timeout, bad URL)
    4  not configured: no API key, or a config file the CLI cannot read
    5  a check failed: a fncall verdict other than accepted, a job with failed sandboxes
  124  timed out waiting (job wait, image import)
    N  `sandbox exec`: the command's own exit code

A command module does ``state = get_state(ctx)`` and ``with state.client() as corral: ...``,
then ``state.emit(document, human=...)``: with ``--json`` the document goes to stdout as JSON
(nothing else ever does), else the human renderer prints it. Progress and notes go to stderr.
"""

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, NoReturn

import httpx
import typer
from rich.console import Console

from corral.cli import config
from corral.client import Corral
from corral.errors import CorralError

EXIT_OK, EXIT_API, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_CONFIG, EXIT_CHECK, EXIT_TIMEOUT = 0, 1, 2, 3, 4, 5, 124


class CliFailure(Exception):
    """Ends the command with ``code`` after printing ``error`` (a JSON-able dict) on stderr."""

    def __init__(self, code: int, error: dict[str, Any]):
        super().__init__(error.get("message", ""))
        self.code = code
        self.error = error


def plain(value: Any) -> Any:
    """A JSON-able form of SDK answers: generated models, attrs/dataclasses, datetimes, enums."""
    if hasattr(value, "to_dict"):
        return plain(value.to_dict())
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value


# Output that goes to a pipe or a file has no screen to fit: tables get as wide as their rows
# (`corral sandbox ls | grep` yields whole ids), where rich would cut them to 80 columns.
PIPED_WIDTH = 10_000


def resource_requests(cpu: float | None, memory_mb: int | None, disk_mb: int | None,
                      pids: int | None) -> dict[str, Any] | None:
    """The spec's ``requests`` from the --*-request options (None: the api's defaults)."""
    given = {k: v for k, v in {"cpu": cpu, "memory_mb": memory_mb, "disk_mb": disk_mb, "pids": pids}.items()
             if v is not None}
    return given or None


def stdout_console() -> Console:
    console = Console(soft_wrap=True)
    if not console.is_terminal:
        console.width = PIPED_WIDTH
    return console


@dataclass
class State:
    url: str | None = None
    api_key: str | None = None
    profile: str | None = None
    json: bool = False
    out: Console = field(default_factory=stdout_console)
    err: Console = field(default_factory=lambda: Console(stderr=True, soft_wrap=True))

    def resolved(self) -> config.Resolved:
        try:
            data = config.load(config.config_path())
            return config.resolve(data, url=self.url, api_key=self.api_key, profile=self.profile)
        except config.ConfigError as exc:
            raise CliFailure(EXIT_CONFIG, {"code": "bad_config", "message": str(exc)}) from None

    @contextmanager
    def client(self) -> Iterator[Corral]:
        where = self.resolved()
        if not where.api_key:
            raise CliFailure(EXIT_CONFIG, {"code": "no_api_key", "message":
                             "no API key: pass --api-key, set CORRAL_API_KEY, or run `corral login`"})
        with Corral(where.url, where.api_key) as corral:
            yield corral

    def emit(self, document: Any, human: Callable[[Any], None] | None = None) -> None:
        """The command's answer: JSON on stdout with ``--json``, else ``human(document)``."""
        if self.json or human is None:
            sys.stdout.write(json.dumps(plain(document), indent=None if self.json else 2) + "\n")
            sys.stdout.flush()
        else:
            human(document)

    def note(self, message: str) -> None:
        """A line for people (stderr, and never in --json mode)."""
        if not self.json:
            self.err.print(message, highlight=False)


def get_state(ctx: typer.Context) -> State:
    state = ctx.find_root().obj
    if not isinstance(state, State):  # a command module run on its own (tests)
        state = ctx.find_root().obj = State()
    return state


def api_error_document(error: CorralError) -> dict[str, Any]:
    """The api's error as it sent it: {"status", "code", "message", "details"}."""
    document: dict[str, Any] = {"status": error.status, "code": error.code, "message": error.message}
    if error.details:
        document["details"] = error.details
    return document


def failure_of(exc: BaseException) -> CliFailure | None:
    """The exit code and stderr document for an exception a command let through; None: a bug."""
    if isinstance(exc, CliFailure):
        return exc
    if isinstance(exc, CorralError):
        return CliFailure(EXIT_API, api_error_document(exc))
    if isinstance(exc, TimeoutError):
        return CliFailure(EXIT_TIMEOUT, {"code": "timeout", "message": str(exc) or "timed out"})
    if isinstance(exc, (httpx.TransportError, httpx.InvalidURL, httpx.UnsupportedProtocol)):
        return CliFailure(EXIT_UNREACHABLE, {"code": "unreachable",
                                             "message": f"cannot reach the api: {exc or type(exc).__name__}"})
    if isinstance(exc, ValueError) and "API key" in str(exc):  # the SDK's own check
        return CliFailure(EXIT_CONFIG, {"code": "no_api_key", "message": str(exc)})
    return None


def report(failure: CliFailure, as_json: bool, err: Console | None = None) -> None:
    """On stderr: the error document as JSON (``--json``), else one readable line (and its fields)."""
    if as_json:
        sys.stderr.write(json.dumps({"error": failure.error}) + "\n")
        return
    err = err or Console(stderr=True, soft_wrap=True)
    error = failure.error
    status = f"{error['status']} " if "status" in error else ""
    err.print(f"[bold red]error[/]: {status}{error.get('code', 'error')}: {error.get('message', '')}", highlight=False)
    for detail in error.get("details") or []:
        loc = ".".join(str(part) for part in detail.get("loc") or [])
        err.print(f"  {loc}: {detail.get('msg', detail)}" if loc else f"  {detail.get('msg', detail)}", highlight=False)


def fail(code: int, error_code: str, message: str) -> NoReturn:
    raise CliFailure(code, {"code": error_code, "message": message})


def pairs(values: list[str] | None, option: str) -> dict[str, str]:
    """``["k=v", ...]`` (repeated ``--label``/``--env``) as a dict; a bad one is a usage error."""
    out = {}
    for value in values or []:
        key, sep, val = value.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{value!r} is not KEY=VALUE", param_hint=option)
        out[key] = val
    return out
