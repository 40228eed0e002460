"""Sandboxes as crun containers on a cgroup v1 host.

Layout per sandbox, under {state_dir}/sandboxes/<id>/:
    config.json     OCI bundle config
    upper/          tmpfs of disk_mb: upper/upper + upper/work for the overlay, so disk_mb
                    is a hard cap and all writes vanish with one umount
    rootfs/         overlay of the layer mounts (top first) + upper
    exec/           per-exec process.json / pid files

The agent must run in its own mount namespace (host.enter_private_mount_namespace): crun
needs the cgroup2 mount hidden, and these mounts must not leak onto the host.
"""

import asyncio
import errno
import json
import os
import re
import shutil
import signal
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from corral_common.errors import (
    BadRequest,
    Conflict,
    CorralError,
    NotFound,
    PayloadTooLarge,
)
from corral_common.exec import ExecChunk, ExecRequest, ExecResult, FileInfo
from corral_common.logging import get_logger
from corral_common.sandboxes import SandboxSpec, Usage

from .. import host
from ..cgroups.base import Cgroup, CgroupDriver, RunStats
from ..cgroups.detect import cgroup_driver
from ..settings import NodeAgentSettings
from . import fs, oci
from .base import ExitReason, FileData, SandboxBackend
from .output import CappedPipe

log = get_logger(__name__)

SANDBOX_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_FINISHED_KEEP = 1024
# After the command exits, how long to keep draining output a background child may still
# hold open (we do not wait for such children: the call returns when the command does).
_DRAIN_GRACE_S = 0.2
_META = "sandbox.json"


class SandboxStartError(CorralError):
    status_code = 500
    code = "start_failed"


@dataclass
class _Sandbox:
    id: str
    spec: SandboxSpec
    dir: str
    cgroup: Cgroup  # crun creates it (config.json cgroupsPath); the agent reads and removes it
    started: float = field(default_factory=time.monotonic)
    pid: int = 0
    pidfd: int = -1
    timer: asyncio.TimerHandle | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    stopping: bool = False
    paused: bool = False
    usage: Usage | None = None
    # Re-adopted from a previous agent run: that run's mount namespace (and with it the
    # overlay at dir/rootfs) is gone, but the container keeps its own mount namespace, so
    # host-side file access goes through its init's root (/proc/<pid>/root).
    adopted: bool = False

    @property
    def rootfs(self) -> str:
        if self.adopted:
            return f"/proc/{self.pid}/root/"  # trailing slash: O_NOFOLLOW still enters it
        return f"{self.dir}/rootfs"


class ContainerBackend(SandboxBackend):
    def __init__(self, settings: NodeAgentSettings):
        self.settings = settings
        self.state_dir = os.path.abspath(settings.state_dir)
        self.crun_root = f"{self.state_dir}/crun"
        self.sandboxes_dir = f"{self.state_dir}/sandboxes"
        self.uid = settings.sandbox_uid
        self.gid = settings.sandbox_gid
        self.on_exit = None
        self._sandboxes: dict[str, _Sandbox] = {}
        self._finished: OrderedDict[str, Usage] = OrderedDict()
        self._starting = 0
        self._tasks: set[asyncio.Task] = set()
        self._cg: CgroupDriver | None = None
        os.makedirs(self.crun_root, mode=0o700, exist_ok=True)
        os.makedirs(self.sandboxes_dir, mode=0o700, exist_ok=True)

    @property
    def cgroups(self) -> CgroupDriver:
        # Read lazily: the mount namespace may be entered after construction.
        if self._cg is None:
            self._cg = cgroup_driver()
        return self._cg

    def _cgroup(self, sandbox_id: str) -> Cgroup:
        return self.cgroups.cgroup(oci.cgroup_path(self.settings.node_id, sandbox_id))

    # ---- crun ---------------------------------------------------------------------------

    def _crun(self, *args: str) -> list[str]:
        return [self.settings.crun, "--root", self.crun_root, *args]

    async def _crun_call(self, *args: str, check: bool = True) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            *self._crun(*args), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await proc.communicate()
        text = out.decode(errors="replace").strip()
        if check and proc.returncode != 0:
            raise RuntimeError(f"crun {args[0]} failed ({proc.returncode}): {text}")
        return proc.returncode or 0, text

    # ---- lifecycle ----------------------------------------------------------------------

    def list_running(self) -> list[str]:
        return [sid for sid, sb in self._sandboxes.items() if not sb.stopping]

    async def start(self, sandbox_id: str, spec: SandboxSpec, lower_dirs: list[str]) -> None:
        if not SANDBOX_ID_RE.match(sandbox_id):
            raise BadRequest(f"invalid sandbox id {sandbox_id!r}", loc=["path", "sandbox_id"])
        if sandbox_id in self._sandboxes:
            raise Conflict(f"sandbox {sandbox_id} already exists")
        if not lower_dirs:
            raise SandboxStartError("no root filesystem layers")
        sb = _Sandbox(id=sandbox_id, spec=spec, dir=f"{self.sandboxes_dir}/{sandbox_id}",
                      cgroup=self._cgroup(sandbox_id))
        self._sandboxes[sandbox_id] = sb
        self._finished.pop(sandbox_id, None)
        self._starting += 1
        try:
            async with sb.lock:
                try:
                    self._prepare_bundle(sb, lower_dirs)
                    await self._run_init(sb)
                except Exception as exc:
                    await self._teardown(sb, kill=True)
                    self._finished.pop(sandbox_id, None)
                    if isinstance(exc, CorralError):
                        raise
                    raise SandboxStartError(f"sandbox {sandbox_id} failed to start: {exc}") from exc
        finally:
            self._starting -= 1
        loop = asyncio.get_running_loop()
        sb.timer = loop.call_later(spec.timeout_s, self._timeout_fired, sandbox_id)
        log.info("sandbox_started", sandbox_id=sandbox_id, pid=sb.pid,
                 ms=round((time.monotonic() - sb.started) * 1000, 1))

    def _prepare_bundle(self, sb: _Sandbox, lower_dirs: list[str]) -> None:
        if os.path.exists(sb.dir):
            # Leftover from a crashed attempt with the same id: never reuse its state.
            host.umount_tree(sb.dir)
            shutil.rmtree(sb.dir)
        os.makedirs(f"{sb.dir}/exec", mode=0o700)
        upper = f"{sb.dir}/upper"
        os.mkdir(upper, 0o700)
        os.mkdir(sb.rootfs, 0o755)
        host.mount_tmpfs(upper, sb.spec.disk_mb, 0o755)
        os.mkdir(f"{upper}/upper", 0o755)
        os.mkdir(f"{upper}/work", 0o700)
        host.mount_overlay(lower_dirs, f"{upper}/upper", f"{upper}/work", sb.rootfs)
        home = f"{sb.rootfs}{oci.HOME}"
        if not os.path.lexists(home):
            os.makedirs(home, 0o755, exist_ok=True)
            os.chown(home, self.uid, self.gid)
        config = oci.build_config(sb.id, sb.spec, node_id=self.settings.node_id, uid=self.uid, gid=self.gid,
                                  with_swap_limit=self.cgroups.swap_limit)
        with open(f"{sb.dir}/config.json", "w") as fh:
            json.dump(config, fh)
        # What a restarted agent needs to re-adopt the sandbox (spec, wall-clock start).
        with open(f"{sb.dir}/{_META}", "w") as fh:
            json.dump({"spec": sb.spec.model_dump(mode="json"), "started_at": time.time()}, fh)

    async def _run_init(self, sb: _Sandbox) -> None:
        pid_file = f"{sb.dir}/init.pid"
        err_path = f"{sb.dir}/crun-run.log"
        # crun run -d hands its stdio to the container: files only, never a pipe we wait on.
        with open(err_path, "wb") as err:  # noqa: ASYNC230 - tiny local file
            proc = await asyncio.create_subprocess_exec(
                *self._crun("run", "--detach", "--pid-file", pid_file, "--bundle", sb.dir, sb.id),
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=err)
            rc = await proc.wait()
        if rc != 0:
            with open(err_path, "rb") as fh:  # noqa: ASYNC230
                msg = fh.read().decode(errors="replace").strip()
            raise SandboxStartError(f"crun run failed ({rc}): {msg}")
        with open(pid_file) as fh:  # noqa: ASYNC230
            sb.pid = int(fh.read().strip())
        try:
            sb.pidfd = os.pidfd_open(sb.pid)
        except ProcessLookupError:
            raise SandboxStartError("sandbox init exited immediately") from None
        asyncio.get_running_loop().add_reader(sb.pidfd, self._init_exited, sb.id)

    def _unwatch(self, sb: _Sandbox) -> None:
        if sb.pidfd >= 0:
            asyncio.get_running_loop().remove_reader(sb.pidfd)
            os.close(sb.pidfd)
            sb.pidfd = -1
        if sb.timer is not None:
            sb.timer.cancel()
            sb.timer = None

    def _init_exited(self, sandbox_id: str) -> None:
        sb = self._sandboxes.get(sandbox_id)
        if sb is None:
            return
        self._unwatch(sb)
        if sb.stopping:
            return
        reason = ExitReason.oom_killed if self._oom_kills(sb) > 0 else ExitReason.exited
        self._spawn(self._end_on_own(sb, reason))

    def _timeout_fired(self, sandbox_id: str) -> None:
        sb = self._sandboxes.get(sandbox_id)
        if sb is None or sb.stopping:
            return
        sb.timer = None
        self._spawn(self._end_on_own(sb, ExitReason.timeout))

    def _spawn(self, coro) -> None:
        # Keep a reference (tasks are otherwise only weakly held) and let close() await them.
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Stop every sandbox and wait for exit handling in flight (agent shutdown)."""
        for sid in list(self._sandboxes):
            await self.stop(sid)
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _end_on_own(self, sb: _Sandbox, reason: ExitReason) -> None:
        async with sb.lock:
            if sb.stopping:
                return  # someone called stop() meanwhile: it reports, not us
            usage = await self._teardown(sb, kill=True)
        log.info("sandbox_ended", sandbox_id=sb.id, reason=str(reason))
        if self.on_exit is not None:
            try:
                res = self.on_exit(sb.id, reason, usage)
                if asyncio.iscoroutine(res):
                    await res
            except Exception:
                log.exception("on_exit_callback_failed", sandbox_id=sb.id)

    async def stop(self, sandbox_id: str) -> Usage:
        sb = self._sandboxes.get(sandbox_id)
        if sb is None:
            return self._finished.get(sandbox_id, Usage())
        async with sb.lock:
            if sb.usage is not None:
                return sb.usage
            return await self._teardown(sb, kill=True)

    async def pause(self, sandbox_id: str) -> None:
        """``crun pause``: the cgroup freezer stops every process; the timeout keeps running."""
        sb = self._get(sandbox_id)
        async with sb.lock:
            if sb.stopping or sb.paused:
                return
            await self._crun_call("pause", sb.id)
            sb.paused = True
            await self._settle_frozen(sb)
        log.info("sandbox_paused", sandbox_id=sandbox_id)

    async def _settle_frozen(self, sb: _Sandbox, timeout_s: float = 2.0) -> None:
        """On cgroup v1, `crun pause` may return while the freezer still says FREEZING (a task
        was busy); writing FROZEN again retries, as the kernel documents. Wait until it holds."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if sb.cgroup.freeze():
                    return
            except OSError:  # no freezer hierarchy, or the cgroup is gone
                return
            await asyncio.sleep(0.01)
        log.warning("sandbox_freeze_incomplete", sandbox_id=sb.id)

    async def resume(self, sandbox_id: str) -> None:
        sb = self._get(sandbox_id)
        async with sb.lock:
            if sb.stopping or not sb.paused:
                return
            await self._crun_call("resume", sb.id)
            sb.paused = False
        log.info("sandbox_resumed", sandbox_id=sandbox_id)

    @staticmethod
    def _oom_kills(sb: _Sandbox) -> int:
        try:
            return sb.cgroup.oom_kills()
        except OSError:  # not created (a failed start) or already removed
            return 0

    def _read_usage(self, sb: _Sandbox) -> Usage:
        try:
            stats = sb.cgroup.stats()
        except OSError:  # not created (a failed start) or already removed
            stats = RunStats()
        return Usage(
            cpu_seconds=stats.cpu_ns / 1e9,
            peak_memory_bytes=stats.peak_memory_bytes,
            wall_time_s=round(time.monotonic() - sb.started, 3),
            oom_kills=stats.oom_kills,
        )

    def usage(self, sandbox_id: str) -> Usage:
        sb = self._sandboxes.get(sandbox_id)
        if sb is None:
            if sandbox_id in self._finished:
                return self._finished[sandbox_id]
            raise NotFound(f"sandbox {sandbox_id} not found")
        return sb.usage or self._read_usage(sb)

    async def _teardown(self, sb: _Sandbox, kill: bool) -> Usage:
        """Everything stop needs; each step tolerates the previous state being half-built."""
        sb.stopping = True
        self._unwatch(sb)
        usage = self._read_usage(sb)
        if sb.paused:
            # A frozen task only dies once thawed: resume first so kill and delete can finish.
            await self._crun_call("resume", sb.id, check=False)
            sb.paused = False
        if kill:
            await self._crun_call("kill", sb.id, "KILL", check=False)
        rc, out = await self._crun_call("delete", "--force", sb.id, check=False)
        if rc != 0 and "does not exist" not in out and "not found" not in out.lower():
            log.warning("crun_delete_failed", sandbox_id=sb.id, output=out)
        try:
            host.umount_tree(sb.dir)
        except OSError:
            log.exception("umount_failed", sandbox_id=sb.id)
        if not any(m.startswith(sb.dir + "/") or m == sb.dir for m in host.mountpoints()):
            # Only ever rm -rf a tree with nothing mounted below it.
            shutil.rmtree(sb.dir, ignore_errors=True)
        sb.cgroup.remove()
        sb.usage = usage
        self._sandboxes.pop(sb.id, None)
        self._finished[sb.id] = usage
        while len(self._finished) > _FINISHED_KEEP:
            self._finished.popitem(last=False)
        self._prune_parent_cgroups()
        return usage

    def _prune_parent_cgroups(self) -> None:
        # crun creates /corral/<node> on each start; removing it while a start is between
        # mkdir(parent) and mkdir(leaf) would fail that start, hence "only when idle".
        if self._sandboxes or self._starting:
            return
        self.cgroups.cgroup(f"/corral/{self.settings.node_id}").remove_if_empty()
        self.cgroups.cgroup("/corral").remove_if_empty()

    async def _crun_containers(self) -> dict[str, dict]:
        """Containers in our crun root: id -> crun's state (pid, status)."""
        rc, out = await self._crun_call("list", "--format", "json", check=False)
        if rc == 0:
            try:
                return {c["id"]: c for c in json.loads(out or "[]")}
            except (ValueError, KeyError, TypeError):
                pass
        names = os.listdir(self.crun_root) if os.path.isdir(self.crun_root) else []
        return {name: {"id": name, "status": "unknown"} for name in names}

    async def cleanup_orphans(self, adopt: bool = False) -> list[str]:
        """Clear what a previous run left. With ``adopt``, containers that still run (or are
        paused) and whose bundle says what they are are taken over instead (returned);
        everything else in our crun root and under sandboxes/ is deleted."""
        adopted: list[str] = []
        for cid, state in (await self._crun_containers()).items():
            if cid in self._sandboxes:
                continue
            if adopt and state.get("status") in ("running", "paused") and self._adopt(cid, state):
                adopted.append(cid)
                continue
            await self._crun_call("kill", cid, "KILL", check=False)
            await self._crun_call("delete", "--force", cid, check=False)
            self._cgroup(cid).remove()
        for name in os.listdir(self.sandboxes_dir):
            path = f"{self.sandboxes_dir}/{name}"
            if name in self._sandboxes:
                # Adopted: its mounts live on in the container's own namespace only; the
                # (dead) previous agent's copies are not in ours, but a crashed cleanup's are.
                host.umount_tree(path)
                continue
            host.umount_tree(path)
            shutil.rmtree(path, ignore_errors=True)
            self._cgroup(name).remove()
        self._prune_parent_cgroups()
        return adopted

    def _adopt(self, sandbox_id: str, state: dict) -> bool:
        """Rebuild the in-memory entry of a container a previous agent run started."""
        sb_dir = f"{self.sandboxes_dir}/{sandbox_id}"
        try:
            with open(f"{sb_dir}/{_META}") as fh:
                meta = json.load(fh)
            spec = SandboxSpec.model_validate(meta["spec"])
            started_at = float(meta["started_at"])
            pid = int(state.get("pid") or 0)
            if pid <= 0:
                with open(f"{sb_dir}/init.pid") as fh:
                    pid = int(fh.read().strip())
            pidfd = os.pidfd_open(pid)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("sandbox_adopt_failed", sandbox_id=sandbox_id, error=str(exc))
            return False
        elapsed = max(0.0, time.time() - started_at)
        sb = _Sandbox(id=sandbox_id, spec=spec, dir=sb_dir, cgroup=self._cgroup(sandbox_id),
                      started=time.monotonic() - elapsed, pid=pid, pidfd=pidfd,
                      paused=state.get("status") == "paused", adopted=True)
        self._sandboxes[sandbox_id] = sb
        loop = asyncio.get_running_loop()
        loop.add_reader(pidfd, self._init_exited, sandbox_id)
        sb.timer = loop.call_later(max(0.0, spec.timeout_s - elapsed), self._timeout_fired, sandbox_id)
        log.info("sandbox_adopted", sandbox_id=sandbox_id, pid=pid, paused=sb.paused, age_s=round(elapsed, 1))
        return True

    def spec_of(self, sandbox_id: str) -> SandboxSpec:
        return self._sandboxes[sandbox_id].spec

    def is_paused(self, sandbox_id: str) -> bool:
        sb = self._sandboxes.get(sandbox_id)
        return bool(sb and sb.paused)

    # ---- exec ---------------------------------------------------------------------------

    def _get(self, sandbox_id: str) -> _Sandbox:
        sb = self._sandboxes.get(sandbox_id)
        if sb is None or sb.stopping:
            raise NotFound(f"sandbox {sandbox_id} not found or not running")
        return sb

    async def exec(self, sandbox_id: str, req: ExecRequest) -> ExecResult:
        return await self._exec(sandbox_id, req, None)

    async def exec_stream(self, sandbox_id: str, req: ExecRequest) -> AsyncIterator[ExecChunk]:
        self._get(sandbox_id)  # fail before the first chunk
        queue: asyncio.Queue[ExecChunk] = asyncio.Queue()
        task = asyncio.ensure_future(
            self._exec(sandbox_id, req, lambda name, text: queue.put_nowait(ExecChunk(type=name, data=text))))
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

    async def _exec(self, sandbox_id: str, req: ExecRequest, on_data) -> ExecResult:
        sb = self._get(sandbox_id)
        if sb.paused:
            raise Conflict(f"sandbox {sandbox_id} is paused", loc=["path", "sandbox_id"], code="sandbox_paused")
        if isinstance(req.cmd, str):
            argv = ["/bin/sh", "-c", req.cmd]
        else:
            argv = list(req.cmd)
        if not argv or not argv[0]:
            raise BadRequest("cmd must not be empty", loc=["body", "cmd"])
        if any("\0" in a for a in argv):
            raise BadRequest("cmd must not contain NUL bytes", loc=["body", "cmd"])
        for k, v in req.env.items():
            if not k or "=" in k or "\0" in k or "\0" in v:
                raise BadRequest(f"invalid environment variable {k!r}", loc=["body", "env", k])
        if req.cwd is not None and "\0" in req.cwd:
            raise BadRequest("cwd must not contain NUL bytes", loc=["body", "cwd"])
        limit = min(req.output_limit, self.settings.output_limit_bytes)
        root = req.user == "root"
        proc_spec = oci.process_spec(argv, uid=self.uid, gid=self.gid, root=root,
                                     env=oci.build_env(sb.spec.env, req.env), cwd=req.cwd or oci.HOME)
        if proc_spec["cwd"] and not proc_spec["cwd"].startswith("/"):
            proc_spec["cwd"] = f"{oci.HOME}/{proc_spec['cwd']}"
        token = uuid.uuid4().hex
        pj, pid_file = f"{sb.dir}/exec/{token}.json", f"{sb.dir}/exec/{token}.pid"
        with open(pj, "w") as fh:  # noqa: ASYNC230
            json.dump(proc_spec, fh)

        oom_before = self._oom_kills(sb)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        t0 = time.monotonic()
        proc = None
        pipes: list[CappedPipe] = []
        timed_out = False
        try:
            try:
                proc = await asyncio.create_subprocess_exec(
                    *self._crun("exec", "--process", pj, "--pid-file", pid_file, sb.id),
                    stdin=asyncio.subprocess.PIPE if req.stdin is not None else asyncio.subprocess.DEVNULL,
                    stdout=out_w, stderr=err_w)
            finally:
                os.close(out_w)
                os.close(err_w)
            pipes = [CappedPipe(out_r, limit, "stdout", on_data), CappedPipe(err_r, limit, "stderr", on_data)]
            out_r = err_r = -1
            feeder = asyncio.ensure_future(self._feed_stdin(proc, req.stdin)) if req.stdin is not None else None
            try:
                await asyncio.wait_for(proc.wait(), timeout=req.timeout_s)
            except TimeoutError:
                timed_out = True
                await self._wait_for_pid_file(proc, pid_file)
                self._kill_exec(proc, pid_file)
                await proc.wait()
            if feeder is not None:
                feeder.cancel()
            await asyncio.wait([p.done for p in pipes], timeout=_DRAIN_GRACE_S)
        except BaseException:
            # Cancelled (stream consumer gone) or failed: never leave the command running.
            if proc is not None and proc.returncode is None:
                await self._wait_for_pid_file(proc, pid_file)
                self._kill_exec(proc, pid_file)
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
        oom = self._oom_kills(sb) > oom_before
        return ExecResult(
            exit_code=None if timed_out else (128 - rc if rc is not None and rc < 0 else rc),
            stdout=pipes[0].text(), stderr=pipes[1].text(),
            duration_ms=round((time.monotonic() - t0) * 1000, 2),
            timed_out=timed_out, truncated=pipes[0].truncated or pipes[1].truncated, oom_killed=oom)

    @staticmethod
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

    @staticmethod
    async def _wait_for_pid_file(proc: asyncio.subprocess.Process, pid_file: str, timeout_s: float = 5.0) -> None:
        """crun writes the command's pid file a moment after starting it (the command may
        already have printed): killing before it exists would kill only `crun exec`, and the
        command would live on in the container."""
        deadline = time.monotonic() + timeout_s
        while not os.path.exists(pid_file) and proc.returncode is None and time.monotonic() < deadline:
            await asyncio.sleep(0.005)

    @staticmethod
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

    # ---- files --------------------------------------------------------------------------

    async def write_file(self, sandbox_id: str, path: str, data: FileData, mode: int = 0o644) -> int:
        sb = self._get(sandbox_id)
        fd, name, dfd = await asyncio.to_thread(fs.open_write, sb.rootfs, path, uid=self.uid, gid=self.gid,
                                                mode=mode)
        cap = self.settings.max_upload_bytes
        written = 0
        ok = False
        try:
            chunks = [data] if isinstance(data, (bytes, bytearray, memoryview)) else data
            if isinstance(chunks, list):
                for c in chunks:
                    written = self._write_chunk(fd, c, written, cap)
            else:
                async for c in chunks:
                    written = self._write_chunk(fd, c, written, cap)
            ok = True
            return written
        finally:
            os.close(fd)
            if not ok:
                try:
                    os.unlink(name, dir_fd=dfd)
                except OSError:
                    pass
            os.close(dfd)

    @staticmethod
    def _write_chunk(fd: int, chunk: bytes, written: int, cap: int) -> int:
        if written + len(chunk) > cap:
            raise PayloadTooLarge(f"upload exceeds {cap} bytes", loc=["body"])
        view = memoryview(chunk)
        try:
            while view:
                n = os.write(fd, view)
                view = view[n:]
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise PayloadTooLarge("sandbox disk is full (disk_mb)", loc=["body"]) from None
            raise
        return written + len(chunk)

    async def open_file(self, sandbox_id: str, path: str) -> tuple[int, AsyncIterator[bytes]]:
        sb = self._get(sandbox_id)
        fd, size = await asyncio.to_thread(fs.open_read, sb.rootfs, path)

        async def chunks() -> AsyncIterator[bytes]:
            try:
                while True:
                    block = await asyncio.to_thread(os.read, fd, 1 << 20)
                    if not block:
                        return
                    yield block
            finally:
                os.close(fd)

        return size, chunks()

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        _size, chunks = await self.open_file(sandbox_id, path)
        return b"".join([c async for c in chunks])

    async def stat(self, sandbox_id: str, path: str) -> FileInfo:
        sb = self._get(sandbox_id)
        return await asyncio.to_thread(fs.stat_path, sb.rootfs, path)

    async def list_dir(self, sandbox_id: str, path: str) -> list[FileInfo]:
        sb = self._get(sandbox_id)
        return await asyncio.to_thread(fs.list_dir, sb.rootfs, path)


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
