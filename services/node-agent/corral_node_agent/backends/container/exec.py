"""Commands in a running container: ``crun exec`` of a process.json, output read with caps.

A command is killed with everything it forked on timeout, on failure, and when a streaming
caller goes away: it never outlives the call that started it. Background children it leaves
behind on a normal exit are not waited for (the call returns when the command does).
"""

import asyncio
import json
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from corral_common.contracts.exec import ExecChunk, ExecRequest, ExecResult, OutputEncoding
from corral_node_agent.backends.commands import checked_argv
from corral_node_agent.backends.container import oci
from corral_node_agent.backends.container.crun import Crun
from corral_node_agent.isolation.identity import Identity
from corral_node_agent.output import CappedPipe

# After the command exits, how long to keep draining output a background child may still
# hold open (we do not wait for such children: the call returns when the command does).
_DRAIN_GRACE_S = 0.2

OnData = Callable[[str, str], None]  # (stream name, piece in the request's output_encoding) as output arrives


def process_for(req: ExecRequest, spec_env: dict[str, str], identity: Identity,
                default_cwd: str | None = None) -> dict[str, Any]:
    """The OCI process of an exec request (BadInput for what crun would choke on);
    ``default_cwd``: the sandbox's (its image's WorkingDir), else the home dir."""
    argv = checked_argv(req, req.env)
    root = req.user == "root"
    proc_spec = oci.process_spec(argv, identity, root=root,
                                 env=oci.build_env(spec_env, req.env, root=root), cwd=req.cwd or default_cwd or oci.HOME)
    if proc_spec["cwd"] and not proc_spec["cwd"].startswith("/"):
        proc_spec["cwd"] = f"{oci.HOME}/{proc_spec['cwd']}"
    return proc_spec


async def run(crun: Crun, container_id: str, exec_dir: str, process: dict[str, Any], req: ExecRequest, *,
              output_limit: int, on_data: OnData | None = None) -> ExecResult:
    """Run one command to its end (or its timeout); ``oom_killed`` is left to the caller,
    which knows the container's cgroup."""
    token = uuid.uuid4().hex
    pj, pid_file = f"{exec_dir}/{token}.json", f"{exec_dir}/{token}.pid"
    with open(pj, "w") as fh:  # noqa: ASYNC230
        json.dump(process, fh)

    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    t0 = time.monotonic()
    proc = None
    pipes: list[CappedPipe] = []
    timed_out = False
    try:
        try:
            proc = await asyncio.create_subprocess_exec(
                *crun.exec_argv(container_id, process_file=pj, pid_file=pid_file),
                stdin=asyncio.subprocess.PIPE if req.stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=out_w, stderr=err_w)
        finally:
            os.close(out_w)
            os.close(err_w)
        pipes = [CappedPipe(fd, output_limit, name, on_data, encoding=req.output_encoding)
                 for fd, name in ((out_r, "stdout"), (err_r, "stderr"))]
        out_r = err_r = -1
        feeder = asyncio.ensure_future(_feed_stdin(proc, req.stdin)) if req.stdin is not None else None
        try:
            await asyncio.wait_for(proc.wait(), timeout=req.timeout_s)
        except TimeoutError:
            timed_out = True
            await _wait_for_pid_file(proc, pid_file)
            _kill_exec(proc, pid_file)
            await proc.wait()
        if feeder is not None:
            feeder.cancel()
        await asyncio.wait([p.done for p in pipes], timeout=_DRAIN_GRACE_S)
    except BaseException:
        # Cancelled (stream consumer gone) or failed: never leave the command running.
        if proc is not None and proc.returncode is None:
            await _wait_for_pid_file(proc, pid_file)
            _kill_exec(proc, pid_file)
        raise
    finally:
        if proc is not None and proc.stdin is not None:
            # A feeder cancelled before it ran never closes it; a pipe transport left
            # open is only closed by GC, possibly after its loop is gone.
            proc.stdin.close()
        for p in pipes:
            p.close()
        for fd in (out_r, err_r):
            if fd >= 0:
                os.close(fd)
        for path in (pj, pid_file):
            try:
                os.unlink(path)
            except OSError:
                pass
    rc = proc.returncode
    return ExecResult(
        exit_code=None if timed_out else (128 - rc if rc is not None and rc < 0 else rc),
        stdout=pipes[0].text(), stderr=pipes[1].text(),
        duration_ms=round((time.monotonic() - t0) * 1000, 2),
        timed_out=timed_out, truncated=pipes[0].truncated or pipes[1].truncated, encoding=req.output_encoding)


async def stream(run_with: Callable[[OnData], Awaitable[ExecResult]],
                 encoding: OutputEncoding = "utf-8") -> AsyncIterator[ExecChunk]:
    """Chunks of output as ``run_with(on_data)`` produces them (pieces in ``encoding``),
    then the ``exit`` chunk."""
    queue: asyncio.Queue[ExecChunk] = asyncio.Queue()
    task = asyncio.ensure_future(run_with(
        lambda name, piece: queue.put_nowait(ExecChunk(type=name, data=piece, encoding=encoding))))
    try:
        while True:
            getter = asyncio.ensure_future(queue.get())
            await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
            if getter.done():
                yield getter.result()
                continue
            getter.cancel()
            while not queue.empty():
                yield queue.get_nowait()
            yield ExecChunk(type="exit", result=task.result())
            return
    finally:
        # Consumer went away (client disconnected): the command must not outlive it.
        if not task.done():
            task.cancel()
            try:
                await task
            except BaseException:  # noqa: BLE001, S110 - its outcome no longer has a reader
                pass


async def _feed_stdin(proc: asyncio.subprocess.Process, data: str) -> None:
    assert proc.stdin is not None
    try:
        proc.stdin.write(data.encode())
        await proc.stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        try:
            proc.stdin.close()
        except Exception:  # noqa: BLE001, S110 - already closed/broken is fine
            pass


async def _wait_for_pid_file(proc: asyncio.subprocess.Process, pid_file: str, timeout_s: float = 5.0) -> None:
    """crun writes the command's pid file a moment after starting it (the command may
    already have printed): killing before it exists would kill only `crun exec`, and the
    command would live on in the container."""
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(pid_file) and proc.returncode is None and time.monotonic() < deadline:  # noqa: ASYNC110, ASYNC240 - crun writes the pid file without telling anyone; a local stat per 5 ms poll
        await asyncio.sleep(0.005)


def _kill_exec(proc: asyncio.subprocess.Process, pid_file: str) -> None:
    """SIGKILL the exec'd command and everything it forked, then crun exec itself."""
    try:
        with open(pid_file) as fh:
            pid = int(fh.read().strip())
    except (OSError, ValueError):
        pid = 0
    if pid > 0:
        for victim in [pid, *_descendants(pid)]:
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass


def _descendants(pid: int) -> list[int]:
    """Host pids of pid's descendants, from /proc (children lists need no extra config)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out
