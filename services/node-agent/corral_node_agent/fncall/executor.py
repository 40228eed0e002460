"""Run one fncall job in isolation: compile once, then every test case in a fresh sandbox.

Each run (the compile, and every case) is its own ``bwrap`` process tree:

- the runtime's root filesystem read-only as ``/``; no network (an empty netns), its own
  pid/ipc/uts/mount/user/cgroup namespaces (``--unshare-all``), a new session, a cleared
  environment, uid 1000 inside and an unprivileged uid (``nobody``) outside;
- a fresh size-limited tmpfs as the working dir ``/work`` (the code and files copied in) and
  another as ``/tmp``: nothing a run writes survives it;
- in its /proc, the host's tables that the run could read (isolation/procfs.py: cmdline, keys,
  acpi...) read as empty (kpage*, slabinfo and the like are root-only: EACCES for it);
- the ``fncall-default`` seccomp profile (isolation/seccomp.py), rlimits (cpu seconds, file
  size, open files, core), and the worker's cgroup (memory+swap, pids, cpu accounting) reset
  before the run;
- stdout/stderr read with caps (over the limit: killed, output_limit_exceeded), and a
  wall-clock timer that kills everything left in the cgroup.

What a run may do (ids, syscall filter, tmpfs sizes, no network, limits) is
`isolation.policy.fncall_run_policy`; this module renders it as bwrap arguments.

A fresh process tree per run is what makes "nothing carries over" hold by construction: no
file, environment variable, background process or imported module outlives its run.
"""

import asyncio
import base64
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from corral_common.contracts.fncall import CaseResult, CompileResult, FncallJob, FncallResult, Verdict, safe_relpath
from corral_host.cgroups.base import Cgroup, RunStats
from corral_host.cgroups.detect import cgroup_driver
from corral_node_agent.fncall.judge import outputs_match
from corral_node_agent.fncall.runtimes import RUNTIME_SPECS, Runtime
from corral_node_agent.isolation import procfs
from corral_node_agent.isolation.identity import FNCALL_IDENTITY
from corral_node_agent.isolation.policy import SANDBOX_OOM_SCORE_ADJ, SandboxPolicy, fncall_run_policy
from corral_node_agent.output import CappedPipe

SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
KEEP_STDERR = 64 * 1024  # bytes of stderr returned per run (more is drained, up to the output limit)
FILE_SIZE_LIMIT = 64 * 1024 * 1024
CPU_POLL_S = 0.02

# Joins the worker's cgroups (as many cgroup.procs files as the first argument says: one per
# v1 hierarchy, one on v2), sets the rlimits and drops root, then execs bwrap. A shell instead
# of a preexec_fn: a preexec_fn forces fork() of the whole agent and blocks its event loop
# until the child has exec'd (~15 ms); this way the spawn is a vfork.
LAUNCH = """
n=$1; shift
while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n - 1)); done
ulimit -t "$1"; ulimit -f "$2"; ulimit -n "$3"; ulimit -c 0; ulimit -s "$4"
echo %d > /proc/self/oom_score_adj || exit 125
uid=$5; shift 5
exec /usr/bin/setpriv --reuid="$uid" --regid="$uid" --clear-groups -- "$@"
""" % SANDBOX_OOM_SCORE_ADJ


@dataclass
class ExecutorConfig:
    rootfs: Path
    scratch_dir: Path  # host dir (a tmpfs such as /dev/shm) for per-call compile dirs
    seccomp_path: Path  # the policy's syscall filter, compiled (SyscallFilter.to_bpf)
    # The masked /proc paths this kernel has: (files, directories) (procfs.present_masks).
    proc_masks: tuple[tuple[str, ...], tuple[str, ...]] = field(default_factory=procfs.present_masks)
    pids_max: int = 64
    open_files: int = 256
    compile_memory_mb: int = 1024
    compile_pids: int = 128


@dataclass
class RawRun:
    exit_code: int | None = None
    signal: int | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    wall_ms: float = 0.0
    wall_killed: bool = False
    cpu_killed: bool = False
    output_exceeded: bool = False
    system_error: str = ""
    stats: RunStats = field(default_factory=RunStats)


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


class Worker:
    """One pool slot: a cgroup and a scratch dir, running one job at a time."""

    def __init__(self, config: ExecutorConfig, name: str, cgroup_group: str):
        self.config = config
        self.name = name
        self.cgroup = cgroup_driver().cgroup(cgroup_group, keep_files=True).create()
        self.scratch = config.scratch_dir / name
        self.calls = 0

    def close(self) -> None:
        self.cgroup.remove()
        shutil.rmtree(self.scratch, ignore_errors=True)

    async def aclose(self) -> None:
        self.close()

    def stop_runs(self) -> None:
        """Kill what runs in this worker now (its root filesystem went away): a run in
        flight ends at once."""
        self.cgroup.kill_all()

    async def renew(self) -> None:
        """Drop what the worker keeps of the root filesystem it ran on (it was mounted anew);
        a cold worker keeps nothing: every run binds the root afresh."""

    # -- one sandboxed process tree ---------------------------------------------------------

    def _bwrap_argv(self, argv: tuple[str, ...] | list[str], policy: SandboxPolicy, *, bind_dir: Path | None,
                    files: list[tuple[str, int, bool]], seccomp_fd: int | None,
                    caps: tuple[str, ...] = (), mask_proc: bool = True) -> list[str]:
        tmpfs_size = str(policy.disk.size_bytes)
        cmd = ["bwrap", "--ro-bind", str(self.config.rootfs), "/", "--proc", "/proc"]
        masked_files, masked_dirs = self.config.proc_masks if mask_proc else ((), ())
        for path in masked_files:
            cmd += ["--dev-bind", "/dev/null", path]  # (--ro-bind is nodev: /dev/null would not open)
        for path in masked_dirs:
            cmd += ["--size", "4096", "--tmpfs", path, "--remount-ro", path]
        cmd += ["--dev", "/dev", "--size", tmpfs_size, "--tmpfs", "/tmp"]  # noqa: S108 - /tmp inside the bwrap sandbox (a private tmpfs)
        if bind_dir is not None:
            cmd += ["--bind", str(bind_dir), "/work"]
        else:
            cmd += ["--size", tmpfs_size, "--perms", "0755", "--tmpfs", "/work"]
            made: set[str] = set()
            for rel, fd, executable in files:
                parent = rel.rpartition("/")[0]
                if parent and parent not in made:
                    parts = parent.split("/")
                    for i in range(1, len(parts) + 1):
                        sub = "/".join(parts[:i])
                        if sub not in made:
                            cmd += ["--perms", "0755", "--dir", f"/work/{sub}"]
                            made.add(sub)
                cmd += ["--perms", "0755" if executable else "0644", "--file", str(fd), f"/work/{rel}"]
        # --unshare-all: a new network namespace too (egress "none"), and a user namespace in
        # which the run has the policy's ids.
        cmd += ["--chdir", "/work", "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
                "--setenv", "PATH", SANDBOX_PATH, "--setenv", "HOME", "/work", "--setenv", "TMPDIR", "/tmp",  # noqa: S108 - /tmp inside the bwrap sandbox (a private tmpfs)
                "--setenv", "LANG", "C.UTF-8", "--uid", str(policy.identity.uid), "--gid", str(policy.identity.gid),
                "--hostname", "corral"]
        for cap in caps:  # capabilities inside the sandbox's user namespace (the zygote's, see zygote.py)
            cmd += ["--cap-add", cap]
        if seccomp_fd is not None:
            cmd += ["--seccomp", str(seccomp_fd)]
        return [*cmd, "--", *argv]

    def _launch_argv(self, cmd: list[str], policy: SandboxPolicy, *, cpu_s: int | str, cgroup: Cgroup) -> list[str]:
        """``cmd`` (bwrap) started through LAUNCH: in ``cgroup``, with the rlimits, as the
        policy's host uid."""
        limits = [str(cpu_s), str(FILE_SIZE_LIMIT // 512), str(self.config.open_files),
                  str(policy.limits.memory_bytes // 1024), str(policy.identity.host_uid)]
        procs = cgroup.procs_files()
        return ["/bin/sh", "-c", LAUNCH, "sh", str(len(procs)), *procs, *limits, *cmd]

    async def _spawn(self, argv: tuple[str, ...] | list[str], policy: SandboxPolicy, *, stdin: bytes | None,
                     cpu_s: int | str, stdout: int, stderr: int,
                     bind_dir: Path | None = None, files: list[tuple[str, Path, bool]] = (),
                     extra_fds: list[int] = (), cgroup: Cgroup | None = None, seccomp: bool = True,
                     caps: tuple[str, ...] = (), mask_proc: bool = True) -> asyncio.subprocess.Process:
        """Start a sandboxed process tree in this worker's cgroup (or ``cgroup``; limits already set).
        ``seccomp``/``mask_proc`` False: the process installs the filter and covers its own /proc
        itself (the zygote's children: with these mounts above it, their fresh /proc would be refused)."""
        fds: list[int] = []
        try:
            stdin_fd: int | None = None
            if stdin is not None:
                stdin_fd = os.memfd_create("stdin", os.MFD_CLOEXEC)
                fds.append(stdin_fd)
                if stdin:
                    os.write(stdin_fd, stdin)
                    os.lseek(stdin_fd, 0, os.SEEK_SET)
            seccomp_fd = None
            if seccomp:
                seccomp_fd = os.open(self.config.seccomp_path, os.O_RDONLY)
                fds.append(seccomp_fd)
            file_fds = []
            for rel, path, executable in files:
                fd = os.open(path, os.O_RDONLY)
                fds.append(fd)
                file_fds.append((rel, fd, executable))
            cmd = self._bwrap_argv(argv, policy, bind_dir=bind_dir, files=file_fds, seccomp_fd=seccomp_fd, caps=caps,
                                   mask_proc=mask_proc)
            return await asyncio.create_subprocess_exec(
                *self._launch_argv(cmd, policy, cpu_s=cpu_s, cgroup=cgroup or self.cgroup),
                stdin=stdin_fd if stdin_fd is not None else asyncio.subprocess.DEVNULL,
                stdout=stdout, stderr=stderr,
                pass_fds=[fd for fd in fds if fd != stdin_fd] + list(extra_fds), close_fds=True)
        finally:
            for fd in fds:
                os.close(fd)

    def _capped_output(self, run: RawRun, out_r: int, err_r: int, output_limit: int) -> list[CappedPipe]:
        """Readers of a run's stdout (kept up to the output limit) and stderr (up to
        KEEP_STDERR); more than the limit on either kills the run: output_limit_exceeded."""

        def overflow() -> None:
            if not run.output_exceeded:
                run.output_exceeded = True
                self.cgroup.kill_all()

        return [CappedPipe(out_r, output_limit, "stdout", on_overflow=overflow),
                CappedPipe(err_r, output_limit, "stderr", keep=min(KEEP_STDERR, output_limit), on_overflow=overflow)]

    async def _watch_cpu(self, run: RawRun, cpu_ms: int) -> None:
        """Kill the run once the cpu time of all its processes (not just wall time) passes cpu_ms."""
        while True:
            await asyncio.sleep(CPU_POLL_S)
            if self.cgroup.cpu_ms() > cpu_ms:
                run.cpu_killed = True
                self.cgroup.kill_all()
                return

    @staticmethod
    async def _collect_output(run: RawRun, pipes: list[CappedPipe]) -> None:
        """Once nothing holds the pipes open any more (the cgroup is empty): the kept output."""
        await asyncio.gather(*(p.done for p in pipes))
        run.stdout, run.stderr = pipes[0].data(), pipes[1].data()

    async def _supervise(self, proc: asyncio.subprocess.Process, out_r: int, err_r: int, *, cpu_ms: int,
                         wall_ms: int, output_limit: int) -> RawRun:
        """Drain capped output, enforce cpu time (whole tree) and wall clock, collect stats."""
        run = RawRun()
        started = time.monotonic()
        pipes = self._capped_output(run, out_r, err_r, output_limit)
        try:
            cpu_task = asyncio.create_task(self._watch_cpu(run, cpu_ms))
            try:
                await asyncio.wait_for(proc.wait(), wall_ms / 1000)
            except (TimeoutError, asyncio.TimeoutError):
                run.wall_killed = True
                self.cgroup.kill_all()
                await proc.wait()
            finally:
                cpu_task.cancel()
            run.wall_ms = (time.monotonic() - started) * 1000
            # The pipes close when the last process holding them is gone: kill stragglers first.
            self.cgroup.kill_all()
            await self._collect_output(run, pipes)
        finally:
            for p in pipes:
                p.close()
        run.stats = self.cgroup.stats()
        rc = proc.returncode
        if rc is not None and rc < 0:
            run.signal = -rc
        elif rc is not None and 128 < rc <= 128 + 64:  # bwrap reports a signalled child as 128+N
            run.exit_code, run.signal = rc, rc - 128
        else:
            run.exit_code = rc
        if rc == 1 and run.stderr.startswith(b"bwrap: "):
            run.system_error = _decode(run.stderr.splitlines()[0])
        return run

    async def _run(self, argv: tuple[str, ...] | list[str], *, stdin: bytes, memory_mb: int, pids: int,
                   cpu_ms: int, wall_ms: int, output_limit: int, bind_dir: Path | None = None,
                   files: list[tuple[str, Path, bool]] = ()) -> RawRun:
        """A cold run: a new sandbox started for this run alone."""
        policy = fncall_run_policy(memory_mb, pids)
        self.cgroup.prepare(policy.limits.memory_bytes, policy.limits.pids)
        cpu_s = max(1, -(-cpu_ms // 1000) + 1)  # backstop only; the verdict uses the cgroup's cpu time
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        try:
            proc = await self._spawn(argv, policy, stdin=stdin, cpu_s=cpu_s, stdout=out_w, stderr=err_w,
                                     bind_dir=bind_dir, files=files)
        except OSError as exc:
            os.close(out_r)
            os.close(err_r)
            return RawRun(system_error=f"cannot start the sandbox: {exc}")
        finally:
            os.close(out_w)
            os.close(err_w)
        return await self._supervise(proc, out_r, err_r, cpu_ms=cpu_ms, wall_ms=wall_ms, output_limit=output_limit)

    # -- a whole job ------------------------------------------------------------------------

    async def run_job(self, job: FncallJob) -> FncallResult:
        runtime: Runtime = RUNTIME_SPECS[job.runtime]
        self.calls += 1
        call_dir = self.scratch / uuid.uuid4().hex[:12]
        result = FncallResult(call_id=job.call_id, runtime=job.runtime, verdict=Verdict.accepted, worker=self.name)
        try:
            call_dir.mkdir(parents=True)
            os.chown(call_dir, FNCALL_IDENTITY.host_uid, FNCALL_IDENTITY.host_gid)
            (call_dir / runtime.source).write_text(job.code)
            for name, content in job.files.items():
                path = call_dir / safe_relpath(name)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(base64.b64decode(content))
            if runtime.compile:
                for p in [call_dir, *call_dir.rglob("*")]:
                    os.chown(p, FNCALL_IDENTITY.host_uid, FNCALL_IDENTITY.host_gid, follow_symlinks=False)
                result.compile = await self._compile(runtime, job, call_dir)
                if result.compile.verdict != Verdict.accepted:
                    result.verdict = result.compile.verdict
                    if result.compile.verdict == Verdict.time_limit_exceeded:
                        result.verdict = Verdict.compile_error
                    return result
            files = [(str(p.relative_to(call_dir)), p, os.access(p, os.X_OK) or p.name == "main")
                     for p in sorted(call_dir.rglob("*")) if p.is_file() and not p.is_symlink()]
            for index, case in enumerate(job.cases):
                last = index == len(job.cases) - 1
                fetch_dir = None
                if job.fetch_files and last:  # SandboxFusion: files are read back after the run
                    fetch_dir = self.scratch / (call_dir.name + "-run")
                    shutil.copytree(call_dir, fetch_dir)
                    for p in [fetch_dir, *fetch_dir.rglob("*")]:
                        os.chown(p, FNCALL_IDENTITY.host_uid, FNCALL_IDENTITY.host_gid, follow_symlinks=False)
                case_result = await self._run_case(runtime, job, case.stdin, case.expected_stdout, files, fetch_dir)
                if fetch_dir is not None:
                    result.files = _fetch(fetch_dir, job.fetch_files)
                    shutil.rmtree(fetch_dir, ignore_errors=True)
                if not add_case(result, case_result, job):
                    break
            return result
        except Exception as exc:  # noqa: BLE001 - a bug or a host problem: the caller gets system_error, never a hang
            result.verdict = Verdict.system_error
            result.message = f"{type(exc).__name__}: {exc}"
            return result
        finally:
            self.cgroup.kill_all()
            shutil.rmtree(call_dir, ignore_errors=True)

    async def _compile(self, runtime: Runtime, job: FncallJob, call_dir: Path) -> CompileResult:
        run = await self._run(runtime.compile, stdin=b"", memory_mb=self.config.compile_memory_mb,
                              pids=self.config.compile_pids, cpu_ms=job.compile_timeout_ms,
                              wall_ms=job.compile_timeout_ms, output_limit=1024 * 1024, bind_dir=call_dir)
        verdict = Verdict.accepted
        if run.system_error:
            verdict = Verdict.system_error
        elif run.wall_killed or run.cpu_killed:
            verdict = Verdict.time_limit_exceeded
        elif run.exit_code != 0 or not (call_dir / runtime.output).exists():
            verdict = Verdict.compile_error
        stderr = run.stderr if not run.system_error else run.system_error.encode()
        return CompileResult(verdict=verdict, exit_code=run.exit_code, stdout=_decode(run.stdout),
                             stderr=_decode(stderr), time_ms=round(run.stats.cpu_ms, 3), wall_ms=round(run.wall_ms, 3))

    async def _run_case(self, runtime: Runtime, job: FncallJob, stdin: str, expected: str | None,
                        files: list[tuple[str, Path, bool]], bind_dir: Path | None) -> CaseResult:
        run = await self._execute(runtime, stdin=stdin.encode(), memory_mb=job.memory_limit_mb,
                              pids=self.config.pids_max, cpu_ms=job.time_limit_ms,
                              wall_ms=job.case_wall_ms(),
                              output_limit=job.output_limit_kb * 1024, bind_dir=bind_dir,
                              files=[] if bind_dir is not None else files)
        return judge_run(run, job, expected)

    async def _execute(self, runtime: Runtime, **kwargs) -> RawRun:
        """Run one case (subclasses may use a pre-started process instead)."""
        return await self._run(runtime.run, **kwargs)


def add_case(result: FncallResult, case_result: CaseResult, job: FncallJob) -> bool:
    """Record a case's result; False when the call should stop here (stop_on_failure)."""
    result.cases.append(case_result)
    if case_result.verdict != Verdict.accepted:
        if result.verdict == Verdict.accepted:
            result.verdict = case_result.verdict
        return not job.stop_on_failure
    return True


def judge_run(run: RawRun, job: FncallJob, expected: str | None) -> CaseResult:
    stdout = _decode(run.stdout)
    cpu_exceeded = run.cpu_killed or run.stats.cpu_ms > job.time_limit_ms or run.signal == 24  # SIGXCPU
    if run.system_error:
        verdict = Verdict.system_error
    elif run.output_exceeded:
        verdict = Verdict.output_limit_exceeded
    elif run.stats.oom_killed:
        verdict = Verdict.memory_limit_exceeded
    elif run.wall_killed or cpu_exceeded:
        verdict = Verdict.time_limit_exceeded
    elif run.exit_code != 0:
        verdict = Verdict.runtime_error
    elif expected is not None and not outputs_match(stdout, expected, job.compare):
        verdict = Verdict.wrong_answer
    else:
        verdict = Verdict.accepted
    stderr = run.stderr if not run.system_error else run.system_error.encode()
    return CaseResult(verdict=verdict, exit_code=run.exit_code, signal=run.signal, stdout=stdout,
                      stderr=_decode(stderr), time_ms=round(run.stats.cpu_ms, 3), wall_ms=round(run.wall_ms, 3),
                      memory_kb=run.stats.peak_memory_kb)


MAX_FETCH_BYTES = 16 * 1024 * 1024


def _fetch(root: Path, names: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    budget = MAX_FETCH_BYTES
    real_root = root.resolve()
    for name in names:
        try:
            rel = safe_relpath(name.removeprefix("/work/"))
        except ValueError:
            continue
        path = (root / rel)
        try:
            resolved = path.resolve()
            if not resolved.is_relative_to(real_root) or not resolved.is_file():
                continue
            data = resolved.read_bytes()[:budget]
        except OSError:
            continue
        budget -= len(data)
        out[name] = base64.b64encode(data).decode()
    return out


def check_host(config: ExecutorConfig) -> str:
    """Empty when this host can run fncall jobs, else why not."""
    if shutil.which("bwrap") is None:
        return "bwrap is not installed"
    if not cgroup_driver().available():
        return "needs root and the memory, pids and cpu accounting cgroup controllers (v1 or v2)"
    if not (config.rootfs / "usr").is_dir():
        return f"no runtime root filesystem at {config.rootfs}"
    return ""
