"""``corral sandbox exec -it``: an interactive shell over the api's streaming exec.

The api's exec runs one command to completion (``/exec/stream`` streams its output; stdin is
given up front, there is no pty). So the shell reads a line, runs it with ``sh -c`` in the
working directory the previous line left, streams its output as it comes, and shows the next
prompt. To carry ``cd`` from line to line each command ends by printing its ``$PWD`` between
two RS (0x1e) bytes; ``CwdTrailer`` takes that trailer out of the output stream. Shell
variables do not outlive their line (each line is a new ``sh``); ``exit`` or Ctrl-D ends it.
"""

import sys
from collections.abc import Callable
from typing import Any

START = b"\x1ecorral-cwd:"
END = b"\x1e"

# Runs the user's line, then reports where it ended up; the line's exit status is kept.
SCRIPT = "{line}\n__corral_rc=$?\nprintf '\\036corral-cwd:%s\\036' \"$PWD\"\nexit $__corral_rc\n"


def wrap(line: str) -> list[str]:
    return ["sh", "-c", SCRIPT.format(line=line)]


class CwdTrailer:
    """Passes output through, holding back only what may be the start of the cwd trailer."""

    def __init__(self) -> None:
        self.held = b""
        self.cwd: str | None = None

    def feed(self, data: bytes) -> bytes:
        buf = self.held + data
        at = buf.find(START)
        if at >= 0:  # the trailer is the last thing the command prints: hold from here on
            self.held = buf[at:]
            return buf[:at]
        keep = next((n for n in range(min(len(START) - 1, len(buf)), 0, -1) if START.startswith(buf[-n:])), 0)
        self.held = buf[len(buf) - keep:]
        return buf[:len(buf) - keep]

    def finish(self) -> bytes:
        """What is left to print once the command ended; sets ``cwd`` when the trailer came."""
        held, self.held = self.held, b""
        at = held.rfind(START)
        end = held.find(END, at + len(START)) if at >= 0 else -1
        if end < 0:
            return held
        self.cwd = held[at + len(START):end].decode(errors="replace")
        return held[:at] + held[end + len(END):]


def run_line(sandbox: Any, line: str, cwd: str | None, timeout_s: float,
             write_out: Callable[[bytes], None], write_err: Callable[[bytes], None]) -> tuple[int, str | None]:
    """Run one line; returns (exit code, the cwd it left, or the old one)."""
    trailer = CwdTrailer()
    code = 0
    for chunk in sandbox.exec_stream(wrap(line), cwd=cwd, timeout_s=timeout_s, output_encoding="base64"):
        if chunk.type == "stdout":
            write_out(trailer.feed(chunk.data_bytes or b""))
        elif chunk.type == "stderr":
            write_err(chunk.data_bytes or b"")
        elif chunk.type == "exit" and chunk.result is not None:
            code = exit_code_of(chunk.result)
    write_out(trailer.finish())
    return code, trailer.cwd or cwd


def exit_code_of(result: Any) -> int:
    if result.timed_out is True:
        return 124
    if result.oom_killed is True:
        return 137
    return 1 if result.exit_code is None else int(result.exit_code)


def interactive(sandbox: Any, timeout_s: float, prompt_in: Callable[[str], str] = input) -> int:
    try:
        import readline  # noqa: F401 - line editing and history for input()
    except ImportError:
        pass

    def out(data: bytes) -> None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()

    def err(data: bytes) -> None:
        sys.stderr.buffer.write(data)
        sys.stderr.buffer.flush()

    cwd, code = None, 0
    code, cwd = run_line(sandbox, ":", cwd, timeout_s, out, err)  # learn the start directory
    while True:
        try:
            line = prompt_in(f"{sandbox.id}:{cwd or '?'}$ ")
        except EOFError:
            out(b"\n")
            return code
        except KeyboardInterrupt:
            out(b"^C\n")
            continue
        words = line.split()
        if words and words[0] in ("exit", "logout") and len(words) <= 2:
            return int(words[1]) if len(words) == 2 and words[1].isdigit() else code
        if not line.strip():
            continue
        try:
            code, cwd = run_line(sandbox, line, cwd, timeout_s, out, err)
        except KeyboardInterrupt:
            out(b"^C\n")
            code = 130
