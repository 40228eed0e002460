"""Data-path models shared by the api (public surface) and node-agents (which run them)."""

from typing import Literal

from pydantic import BaseModel, Field

from corral_common.inputs import ProcessArgs, ProcessCwd, ProcessEnv

DEFAULT_OUTPUT_LIMIT = 1024 * 1024  # bytes per stream per call

# Port ingress: a node-agent marks the answers that come from the sandbox's port with this
# header, so the api passes the app's own 404 on as the app's, not as a node error.
INGRESS_MARK = "x-corral-ingress"

# How stdout/stderr travel: "utf-8" decodes them as text (bytes that are not valid UTF-8
# become U+FFFD, as they always did); "base64" is the raw bytes, intact.
OutputEncoding = Literal["utf-8", "base64"]


class ExecRequest(BaseModel):
    cmd: ProcessArgs = Field(description="argv list, or a shell string run with /bin/sh -c")
    cwd: ProcessCwd = Field(None, max_length=4096, description="Working directory (default: the user's home)")
    env: ProcessEnv = Field(default_factory=dict)
    stdin: str | None = Field(None, description="Text fed to the command's standard input")
    timeout_s: float = Field(60.0, gt=0, le=24 * 3600)
    output_limit: int = Field(DEFAULT_OUTPUT_LIMIT, ge=1, le=64 * 1024 * 1024,
                              description="Bytes kept per stream; beyond it output is dropped and truncated=true")
    user: Literal["user", "root"] = "user"
    output_encoding: OutputEncoding = Field(
        "utf-8", description="How stdout/stderr come back: utf-8 text (invalid bytes become U+FFFD) or base64 "
                             "of the raw bytes; output_limit counts raw bytes either way")


class ExecResult(BaseModel):
    exit_code: int | None
    stdout: str
    stderr: str
    duration_ms: float
    timed_out: bool = False
    truncated: bool = False
    oom_killed: bool = False
    encoding: OutputEncoding = Field("utf-8", description="How stdout and stderr are encoded (the request's "
                                                          "output_encoding)")


class ExecChunk(BaseModel):
    """One line of a streaming exec (JSON lines): output as it comes, then a final `exit`."""

    type: Literal["stdout", "stderr", "exit"]
    data: str | None = None
    # On stdout/stderr chunks: how `data` is encoded. A base64 chunk decodes on its own
    # (it is the base64 of the bytes read at once); a utf-8 chunk never splits a character.
    encoding: OutputEncoding | None = None
    result: ExecResult | None = None


class FileInfo(BaseModel):
    name: str
    path: str
    type: Literal["file", "dir", "symlink", "other"]
    size: int
    mode: int
    mtime: float


class FileWritten(BaseModel):
    """A node-agent's answer to an upload (``PUT /v1/sandboxes/{id}/files``)."""

    path: str
    size: int  # bytes written
