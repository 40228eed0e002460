"""Warm python workers: the next call's sandbox and interpreter are started before it arrives.

A ``WarmWorker`` keeps one pre-started sandbox (same bwrap isolation as a cold run: fresh
tmpfs ``/work``, no network, seccomp, its cgroup) in which ``python3`` has already
initialised and waits on a pipe for its one and only job. When a call comes, the worker sets
the call's limits on the cgroup, resets its cpu/peak-memory counters, and sends the code,
files and stdin; the interpreter writes the files into its private ``/work``, points fd 0 at
the stdin, and runs the code as ``__main__``. After the run the whole process tree is killed
and a new one is started for the next call — a process is never reused, so nothing (files,
environment, modules, background processes) carries over. That is ~20 ms of interpreter and
sandbox start-up moved off the call's critical path.

Anything unusual (a call needing ``fetch_files``, a memory limit below what the idle
interpreter already uses, a pre-start that failed) falls back to a cold run.
"""

import asyncio
import marshal
import os
from contextlib import suppress

from corral_common.logging import get_logger
from corral_node_agent.fncall.executor import ExecutorConfig, RawRun, Worker
from corral_node_agent.fncall.runtimes import Runtime

log = get_logger("corral.fncall.warm")

IDLE_MEMORY_MB = 256  # cgroup limit while waiting for a call
MAX_CPU_S = 130  # rlimit backstop of a pre-started process (the cgroup watcher enforces the real limit)

# Runs inside the sandbox. Only builtins and modules the interpreter loads anyway. The
# interpreter starts with -S: `site` costs ~5 ms of CPU per start here and adds nothing in the
# judge tree (empty dist-packages, a sitecustomize that only looks for apport), so the launcher
# adds what user code can notice from it: exit()/quit() and the dist-packages dirs on sys.path.
LAUNCHER = r"""
import os, sys, marshal, builtins, _sitebuiltins
builtins.exit = _sitebuiltins.Quitter("exit", "Ctrl-D (i.e. EOF)")
builtins.quit = _sitebuiltins.Quitter("quit", "Ctrl-D (i.e. EOF)")
sys.path.extend(("/usr/local/lib/python3.11/dist-packages", "/usr/lib/python3/dist-packages"))
def _corral_load():
    fd = int(sys.argv[1])
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    return marshal.loads(b"".join(chunks))
def _corral_setup(code, files, stdin):
    for rel, data in files:
        if os.path.dirname(rel):
            os.makedirs(os.path.dirname(rel), exist_ok=True)
        with open(rel, "wb") as fh:
            fh.write(data)
    with open("main.py", "w") as fh:
        fh.write(code)
    fd = os.memfd_create("stdin")
    os.write(fd, stdin)
    os.lseek(fd, 0, 0)
    os.dup2(fd, 0)
    os.close(fd)
_code, _files, _stdin = _corral_load()
_corral_setup(_code, _files, _stdin)
_main = type(sys)("__main__")
_main.__file__ = "/work/main.py"
_main.__builtins__ = __builtins__
sys.modules["__main__"] = _main
sys.argv[:] = ["main.py"]
sys.path.insert(0, "/work")
del _corral_load, _corral_setup, _files, _stdin
try:
    _compiled = compile(_code, "/work/main.py", "exec")
except SyntaxError as _exc:
    sys.excepthook(type(_exc), _exc.with_traceback(None), None)
    sys.exit(1)
del _code
try:
    exec(_compiled, _main.__dict__)
except SystemExit:
    raise
except BaseException as _exc:  # the traceback as `python3 main.py` prints it, without this frame
    _exc.__traceback__ = _exc.__traceback__.tb_next
    sys.excepthook(type(_exc), _exc, _exc.__traceback__)
    sys.exit(1)
"""


class WarmWorker(Worker):
    def __init__(self, config: ExecutorConfig, name: str, cgroup_group: str):
        super().__init__(config, name, cgroup_group)
        self._proc: asyncio.subprocess.Process | None = None
        self._control: int | None = None  # write end of the pre-started process's job pipe
        self._starting: asyncio.Task | None = None
        self.warm_runs = 0
        self.cold_runs = 0

    def is_warm(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    def prestart_soon(self) -> None:
        if self._starting is None or self._starting.done():
            self._starting = asyncio.create_task(self._prestart())

    async def _prestart(self) -> None:
        self._discard()
        read_fd, write_fd = os.pipe()
        try:
            os.set_inheritable(read_fd, True)
            memory = IDLE_MEMORY_MB * 1024 * 1024
            self.cgroup.prepare(memory, self.config.pids_max)
            # bwrap passes inherited fds through; the launcher learns the number from argv.
            proc = await self._spawn(("/usr/bin/python3", "-E", "-s", "-S", "-c", LAUNCHER, str(read_fd)), stdin=None,
                                     memory_bytes=memory, cpu_s=MAX_CPU_S, extra_fds=[read_fd])
        except Exception:
            os.close(write_fd)
            log.exception("fncall.prestart_failed", worker=self.name)
            return
        finally:
            os.close(read_fd)
        self._proc, self._control = proc, write_fd

    def _discard(self) -> None:
        if self._control is not None:
            os.close(self._control)
            self._control = None
        if self._proc is not None:
            self.cgroup.kill_all()
            self._proc = None

    def close(self) -> None:
        if self._starting is not None:
            self._starting.cancel()
        self._discard()
        super().close()

    async def aclose(self) -> None:
        """Close from inside the loop: let a pre-start in progress finish, then kill it."""
        if self._starting is not None and not self._starting.done():
            with suppress(Exception):
                await self._starting
        proc = self._proc
        self._discard()
        if proc is not None:
            with suppress(Exception):
                await asyncio.wait_for(proc.wait(), 5)
        super().close()

    async def _execute(self, runtime: Runtime, **kwargs) -> RawRun:
        if self._starting is not None and not self._starting.done():
            with suppress(Exception):
                await self._starting
        try:
            if runtime.name == "python" and kwargs.get("bind_dir") is None and self.is_warm():
                run = await self._execute_warm(runtime, **kwargs)
                if run is not None:
                    self.warm_runs += 1
                    return run
            self._discard()
            self.cold_runs += 1
            return await super()._execute(runtime, **kwargs)
        finally:
            if runtime.name == "python":
                self.prestart_soon()  # the next call's process starts while this reply goes out

    async def _execute_warm(self, runtime: Runtime, **kwargs) -> RawRun | None:
        proc, control = self._proc, self._control
        self._proc = self._control = None
        try:
            self.cgroup.arm(kwargs["memory_mb"] * 1024 * 1024, kwargs["pids"])
        except OSError:  # the idle interpreter already uses more than this call allows
            os.close(control)
            self.cgroup.kill_all()
            return None
        files = [(rel, path.read_bytes()) for rel, path, _ in kwargs["files"] if rel != runtime.source]
        code = next((path.read_text() for rel, path, _ in kwargs["files"] if rel == runtime.source), "")
        payload = marshal.dumps((code, files, kwargs["stdin"]))
        writer = asyncio.create_task(_write_all(control, payload))
        try:
            return await self._supervise(proc, cpu_ms=kwargs["cpu_ms"], wall_ms=kwargs["wall_ms"],
                                         output_limit=kwargs["output_limit"])
        finally:
            writer.cancel()
            with suppress(asyncio.CancelledError, Exception):
                await writer


async def _write_all(fd: int, data: bytes) -> None:
    """Write to a pipe without blocking the loop, then close it (EOF = the job is complete)."""
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)
    view = memoryview(data)
    try:
        while view:
            try:
                n = os.write(fd, view)
                view = view[n:]
            except BlockingIOError:
                ready = loop.create_future()
                loop.add_writer(fd, ready.set_result, None)
                try:
                    await ready
                finally:
                    loop.remove_writer(fd)
            except BrokenPipeError:
                return
    finally:
        os.close(fd)
