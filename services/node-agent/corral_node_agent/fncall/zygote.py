"""Python workers with a zygote: one initialised interpreter per worker, forked per run.

A ``ZygoteWorker`` keeps one long-lived bwrap sandbox (read-only judge tree, empty network
namespace, cleared environment, uid 1000 inside and ``nobody`` outside) in which ``python3``
runs ``zygote_main.py``: it has initialised once and forks for every run (see that file for
what the forked child does). Compared with a new bwrap sandbox and interpreter per run this
takes ~15 ms of CPU off every call; the per-run isolation is the same:

- own pid namespace (the run's pid 1 is a reaper: its exit kills whatever the code left running),
  own mount, ipc and uts namespaces, fresh size-limited tmpfs ``/work``, ``/tmp``, ``/dev/shm``;
- the worker's run cgroup (memory+swap, pids, cpu accounting; limits set and counters reset
  by the agent before each run) — the run joins it itself through ``cgroup.procs`` fds the
  agent opened as root, before it starts anything; the zygote lives in a cgroup of its own;
- the same /proc masks as a cold run (isolation/procfs.py) on the child's fresh /proc;
- rlimits, every capability dropped, the same seccomp filter as a cold run (installed in the
  child after its mounts: the filter denies mount/unshare, which the child needs first);
- wall-clock and cpu-time kill through the run cgroup, capped output.

The zygote's sandbox gets CAP_SYS_ADMIN and CAP_SETPCAP inside its own user namespace only
(bwrap ``--cap-add``): enough to create the per-run namespaces and mounts, nothing on the host.

A call needing ``fetch_files``, any other runtime, or a zygote that cannot start, falls back
to the cold path (a new sandbox per run).
"""

import asyncio
import base64
import marshal
import os
import socket
import struct
import time
from contextlib import suppress
from pathlib import Path

from corral_common.contracts.fncall import FncallJob, FncallResult, Verdict, safe_relpath
from corral_common.logging import get_logger
from corral_host.cgroups.detect import cgroup_driver
from corral_node_agent.errors import RuntimeFailure
from corral_node_agent.fncall.executor import (
    FILE_SIZE_LIMIT,
    ExecutorConfig,
    RawRun,
    Worker,
    add_case,
    judge_run,
)
from corral_node_agent.fncall.runtimes import RUNTIME_SPECS
from corral_node_agent.isolation.policy import fncall_run_policy

log = get_logger(__name__)

ZYGOTE_SOURCE = (Path(__file__).parent / "zygote_main.py").read_text()
ZYGOTE_MEMORY_MB = 128  # the zygote's own cgroup (it plus a just-forked child before it moves)
ZYGOTE_PIDS = 8
ZYGOTE_CAPS = ("CAP_SYS_ADMIN", "CAP_SETPCAP")
START_TIMEOUT_S = 20.0
RETRY_START_S = 30.0  # after a zygote failed to start
REPLY_GRACE_S = 2.0  # after killing a run: how long the zygote may take to report it
SETUP_FAILED = 125  # exit status of a run whose setup (before the user code) failed


class ZygoteUnavailable(RuntimeFailure):
    """The zygote did not start or stopped answering (the worker falls back to cold starts)."""


class ZygoteWorker(Worker):
    def __init__(self, config: ExecutorConfig, name: str, cgroup_group: str):
        super().__init__(config, name, cgroup_group)
        self.zygote_cgroup = cgroup_driver().cgroup(f"{cgroup_group}.zygote", keep_files=True).create()
        self._proc: asyncio.subprocess.Process | None = None
        self._control: socket.socket | None = None
        self._starting: asyncio.Task | None = None
        self.zygote_runs = 0
        self.cold_runs = 0
        self.zygote_starts = 0
        self._emptied = False  # the run cgroup was seen empty after the last run (no kill needed before the next)
        self._retry_after = 0.0  # monotonic time before which a failed zygote is not restarted

    # -- the zygote's life ------------------------------------------------------------------------

    def is_warm(self) -> bool:
        return self._control is not None and self._proc is not None and self._proc.returncode is None

    def prestart_soon(self) -> None:
        if self.is_warm() or time.monotonic() < self._retry_after:
            return
        if self._starting is None or self._starting.done():
            self._starting = asyncio.create_task(self._start_zygote())

    async def _ready(self) -> bool:
        """True once the zygote runs (starting it first if needed; False if it cannot start)."""
        self.prestart_soon()
        if self._starting is not None and not self._starting.done():
            with suppress(Exception):
                await self._starting
        return self.is_warm()

    async def _start_zygote(self) -> None:
        self._stop_zygote()
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        passed: list[int] = [child.fileno()]
        try:
            passed.append(os.open(self.config.seccomp_path, os.O_RDONLY | os.O_CLOEXEC))
            # Opened by root here, so the unprivileged child may write its own pid (0) into them.
            passed += [os.open(f, os.O_WRONLY | os.O_CLOEXEC) for f in self.cgroup.procs_files()]
            self.scratch.mkdir(parents=True, exist_ok=True)
            policy = fncall_run_policy(ZYGOTE_MEMORY_MB, ZYGOTE_PIDS)
            self.zygote_cgroup.prepare(policy.limits.memory_bytes, policy.limits.pids)
            log_fd = os.open(self.scratch / "zygote.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                # The program comes on stdin (a memfd): as -c it would fill every `ps` line.
                # No --seccomp and no /proc masks: the zygote's children install the filter and
                # cover their fresh /proc themselves (the masks are given to them here). Mounts
                # over this sandbox's /proc would make the kernel refuse theirs (not fully visible).
                masked_files, masked_dirs = (",".join(paths) for paths in self.config.proc_masks)
                argv = (str(passed[0]), str(passed[1]), masked_files, masked_dirs, *(str(fd) for fd in passed[2:]))
                proc = await self._spawn(("/usr/bin/python3", "-E", "-s", "-S", "-", *argv),
                                         policy, stdin=ZYGOTE_SOURCE.encode(), cpu_s="unlimited", stdout=log_fd,
                                         stderr=log_fd, extra_fds=passed, cgroup=self.zygote_cgroup, seccomp=False,
                                         caps=ZYGOTE_CAPS, mask_proc=False)
            finally:  # the zygote has its copies now; an exit of it must show as EOF on parent
                os.close(log_fd)
                child.close()
                for fd in passed[1:]:
                    os.close(fd)
                passed = []
            parent.setblocking(False)
            loop = asyncio.get_running_loop()
            ready = await asyncio.wait_for(loop.sock_recv(parent, 16), START_TIMEOUT_S)
            if ready != b"ready":
                raise ZygoteUnavailable(f"zygote said {ready!r}: {self._zygote_log()}")
        except Exception:
            parent.close()
            self.zygote_cgroup.kill_all()
            self._retry_after = time.monotonic() + RETRY_START_S  # meanwhile calls run cold
            log.exception("fncall.zygote_start_failed", worker=self.name)
            return
        finally:
            child.close()
            for fd in passed[1:]:
                os.close(fd)  # (only when spawning failed before the inner finally)
        self._proc, self._control = proc, parent
        self.zygote_starts += 1

    def _zygote_log(self) -> str:
        with suppress(OSError):
            return (self.scratch / "zygote.log").read_text()[-2000:]
        return ""

    def _stop_zygote(self) -> None:
        if self._control is not None:
            self._control.close()
            self._control = None
        if self._proc is not None:
            self.zygote_cgroup.kill_all()
            self._proc = None

    def close(self) -> None:
        if self._starting is not None:
            self._starting.cancel()
        self._stop_zygote()
        self.zygote_cgroup.remove()
        super().close()

    async def aclose(self) -> None:
        if self._starting is not None and not self._starting.done():
            with suppress(Exception):
                await self._starting
        proc = self._proc
        self._stop_zygote()
        if proc is not None:
            with suppress(Exception):
                await asyncio.wait_for(proc.wait(), 5)
        self.zygote_cgroup.remove()
        super().close()

    def stop_runs(self) -> None:
        super().stop_runs()
        self.zygote_cgroup.kill_all()  # the zygote (or one starting) reads the old root too

    async def renew(self) -> None:
        # A zygote start under way fails on the old root: let it end, then allow a start at once.
        if self._starting is not None and not self._starting.done():
            with suppress(Exception):
                await self._starting
        self._stop_zygote()
        self._retry_after = 0.0

    # -- a call -------------------------------------------------------------------------------------

    async def run_job(self, job: FncallJob) -> FncallResult:
        if job.runtime != "python" or job.fetch_files or not await self._ready():
            if job.runtime == "python":
                self.cold_runs += 1
            return await super().run_job(job)
        self.calls += 1
        result = FncallResult(call_id=job.call_id, runtime=job.runtime, verdict=Verdict.accepted, worker=self.name)
        try:
            files = [(safe_relpath(name), base64.b64decode(content)) for name, content in job.files.items()]
            files = [(rel, data) for rel, data in files if rel != RUNTIME_SPECS["python"].source]
            for case in job.cases:
                run = await self._run_in_zygote(job, files, case.stdin.encode())
                if not add_case(result, judge_run(run, job, case.expected_stdout), job):
                    break
        except Exception as exc:  # noqa: BLE001 - a bug or a host problem: the caller gets system_error, never a hang
            result.verdict = Verdict.system_error
            result.message = f"{type(exc).__name__}: {exc}"
            self._emptied = False
        return result

    async def _run_in_zygote(self, job: FncallJob, files: list[tuple[str, bytes]], stdin: bytes) -> RawRun:
        control = self._control
        if control is None or not self.is_warm():
            if not await self._ready():
                return RawRun(system_error="the python zygote is not running")
            control = self._control
        policy = fncall_run_policy(job.memory_limit_mb, self.config.pids_max)
        self.cgroup.prepare(policy.limits.memory_bytes, policy.limits.pids, known_empty=self._emptied)
        self._emptied = False
        payload = marshal.dumps({
            "code": job.code, "files": files, "stdin": stdin, "tmpfs_bytes": policy.disk.size_bytes,
            "cpu_s": max(1, -(-job.time_limit_ms // 1000) + 1),  # backstop; the verdict uses the cgroup's cpu time
            "fsize": FILE_SIZE_LIMIT, "nofile": self.config.open_files, "stack": policy.limits.memory_bytes})
        payload_fd = os.memfd_create("job", os.MFD_CLOEXEC)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(payload_fd, view):]
            socket.send_fds(control, [b"j"], [payload_fd, out_w, err_w])
        except OSError as exc:
            for fd in (out_r, err_r):
                os.close(fd)
            self._stop_zygote()
            self.prestart_soon()
            return RawRun(system_error=f"cannot hand the run to the zygote: {exc}")
        finally:
            for fd in (payload_fd, out_w, err_w):
                os.close(fd)
        self.zygote_runs += 1
        return await self._supervise_zygote_run(control, out_r, err_r, cpu_ms=job.time_limit_ms,
                                                wall_ms=job.case_wall_ms(),
                                                output_limit=job.output_limit_kb * 1024)

    async def _supervise_zygote_run(self, control: socket.socket, out_r: int, err_r: int, *, cpu_ms: int,
                                    wall_ms: int, output_limit: int) -> RawRun:
        loop = asyncio.get_running_loop()
        run = RawRun()
        started = time.monotonic()
        pipes = self._capped_output(run, out_r, err_r, output_limit)
        try:
            cpu_task = asyncio.ensure_future(self._watch_cpu(run, cpu_ms))
            reply = b""
            try:
                try:
                    reply = await asyncio.wait_for(loop.sock_recv(control, 16), wall_ms / 1000)
                except (TimeoutError, asyncio.TimeoutError):
                    run.wall_killed = True
                    self.cgroup.kill_all()
                    with suppress(TimeoutError, asyncio.TimeoutError):
                        reply = await asyncio.wait_for(loop.sock_recv(control, 16), REPLY_GRACE_S)
            finally:
                cpu_task.cancel()
            run.wall_ms = (time.monotonic() - started) * 1000
            self._emptied = self.cgroup.kill_all()  # the pipes close when the last process holding them is gone
            await self._collect_output(run, pipes)
        finally:
            for p in pipes:
                p.close()
        run.stats = self.cgroup.stats()
        if len(reply) != 4:  # the zygote died (or hangs): replace it
            self._stop_zygote()
            self.prestart_soon()
            run.system_error = "the python zygote died" + (f": {self._zygote_log()}" if self._zygote_log() else "")
            return run
        rc = os.waitstatus_to_exitcode(struct.unpack("i", reply)[0])
        if rc < 0:
            run.signal = -rc
        elif 128 < rc <= 128 + 64:  # the run's init reports a signalled program as 128+N (as bwrap)
            run.exit_code, run.signal = rc, rc - 128
        else:
            run.exit_code = rc
        if rc == SETUP_FAILED and run.stderr.startswith(b"corral-zygote: "):
            run.system_error = run.stderr.splitlines()[0].decode(errors="replace")
        return run

