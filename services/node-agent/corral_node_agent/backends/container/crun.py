"""The crun calls the container backend makes, one method each.

Every call runs ``crun --root <state_dir>/crun``: the node's containers live in a crun root
of their own, so ``list`` sees only them and a restarted agent finds exactly its own.
"""

import asyncio
import json
import os
from dataclasses import dataclass

import psutil

from corral_node_agent.errors import RuntimeFailure
from corral_node_agent.isolation.policy import SANDBOX_OOM_SCORE_ADJ

# An exec's processes are the OOM killer's first choice, as its init is (isolation/policy.py).
# (choom is util-linux's, on every Debian/Ubuntu host and in deploy/Dockerfile's image.)
EXEC_OOM_SCORE = ["choom", "-n", str(SANDBOX_OOM_SCORE_ADJ), "--"]

class CrunError(RuntimeFailure):
    """A crun call that had to succeed failed (its output says why)."""


@dataclass(frozen=True)
class CrunContainer:
    id: str
    status: str  # "running", "paused", "stopped"... or "unknown" (crun could not list it)
    pid: int = 0


class Crun:
    def __init__(self, binary: str, root: str, call_timeout_s: float = 60.0):
        """``call_timeout_s``: the longest a call other than ``run`` may take (they take
        milliseconds; one stuck on a task the kernel cannot kill, a freezer that never
        settles, would otherwise hold its sandbox's lock, and its teardown, for good)."""
        self.binary = binary
        self.root = root
        self.call_timeout_s = call_timeout_s

    def argv(self, *args: str) -> list[str]:
        return [self.binary, "--root", self.root, *args]

    async def _call(self, *args: str, check: bool = True) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            *self.argv(*args), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), self.call_timeout_s)
            text = out.decode(errors="replace").strip()
        except TimeoutError:
            proc.kill()
            await proc.wait()
            text = f"did not finish within {self.call_timeout_s:g} s: killed"
        if check and proc.returncode != 0:
            raise CrunError(f"crun {args[0]} failed ({proc.returncode}): {text}")
        return proc.returncode or 0, text

    async def run_detached(self, container_id: str, bundle: str, *, pid_file: str, log_path: str,
                           nice: int = 0, timeout_s: float | None = None) -> None:
        """``crun run --detach``: returns once the container's init runs (its pid in pid_file).
        ``nice``: crun runs at that niceness (and so does the init it leaves: the caller resets it).
        ``timeout_s``: past it, crun and every process it started (its hooks, the container's
        half-made init) are killed and CrunError raised; the caller tears the rest down."""
        # crun run -d hands its stdio to the container: files only, never a pipe we wait on.
        # And never /dev/null: crun fchown()s the init's std streams to the sandbox user, which
        # would hand the host's /dev/null to a sandbox uid (free to chmod it for the whole host).
        # stdin is an empty pipe instead (EOF), stdout/stderr the log file.
        stdin, closed = os.pipe2(os.O_CLOEXEC)
        os.close(closed)
        try:
            with open(log_path, "wb") as err:  # noqa: ASYNC230 - tiny local file
                argv = self.argv("run", "--detach", "--pid-file", pid_file, "--bundle", bundle, container_id)
                proc = await asyncio.create_subprocess_exec(
                    *(["nice", "-n", str(nice), *argv] if nice else argv), stdin=stdin, stdout=err, stderr=err)
                try:
                    rc = await asyncio.wait_for(proc.wait(), timeout_s)
                except TimeoutError:
                    await asyncio.to_thread(_kill_run, argv)
                    await proc.wait()
                    raise CrunError(f"crun run did not finish within {timeout_s:g} s: killed") from None
                except asyncio.CancelledError:  # the start abandoned (agent shutdown)
                    _kill_run(argv)
                    raise
        finally:
            os.close(stdin)
        if rc != 0:
            with open(log_path, "rb") as fh:  # noqa: ASYNC230
                msg = fh.read().decode(errors="replace").strip()
            raise CrunError(f"crun run failed ({rc}): {msg}")

    def seccomp_program(self, container_id: str) -> bytes | None:
        """The seccomp program crun installs in the container's processes (it keeps it in its
        state: the init's and every ``crun exec``'s); None: no filter."""
        try:
            with open(f"{self.root}/{container_id}/seccomp.bpf", "rb") as fh:
                return fh.read()
        except FileNotFoundError:
            return None

    def exec_argv(self, container_id: str, *, process_file: str, pid_file: str) -> list[str]:
        """``crun exec`` of a process.json; the caller spawns it with its own stdio. Under
        choom(1): crun applies the process's oomScoreAdj to a container's init but not to an
        exec, which would keep the agent's (AGENT_OOM_SCORE_ADJ, last for the OOM killer)."""
        return [*EXEC_OOM_SCORE, *self.argv("exec", "--process", process_file, "--pid-file", pid_file, container_id)]

    async def pause(self, container_id: str) -> None:
        await self._call("pause", container_id)

    async def resume(self, container_id: str, *, check: bool = True) -> None:
        await self._call("resume", container_id, check=check)

    async def kill(self, container_id: str, signal: str = "KILL") -> None:
        """Best effort: a container already gone is fine."""
        await self._call("kill", container_id, signal, check=False)

    async def delete(self, container_id: str, attempts: int = 3) -> tuple[int, str]:
        """``crun delete --force``, tried again when it fails; (exit code, output) of the last
        try, for the caller to judge. A full CI run once left a container's state behind, its
        cgroup and bundle gone (cause not found: crun 1.8 handles the exit races its source
        shows); a try that fails with the state still there is tried again."""
        for attempt in range(attempts):
            rc, out = await self._call("delete", "--force", container_id, check=False)
            if rc == 0 or not os.path.isdir(f"{self.root}/{container_id}"):  # noqa: ASYNC240 - one stat
                return rc, out
            if attempt + 1 < attempts:
                await asyncio.sleep(0.05 * (attempt + 1))
        return rc, out

    async def list(self) -> dict[str, CrunContainer]:
        """Containers in our crun root. If crun cannot list them, the names in the root
        (status "unknown"), so a cleanup still finds them."""
        rc, out = await self._call("list", "--format", "json", check=False)
        if rc == 0:
            try:
                return {c["id"]: CrunContainer(id=c["id"], status=c.get("status", "unknown"), pid=int(c.get("pid") or 0))
                        for c in json.loads(out or "[]")}
            except (ValueError, KeyError, TypeError):
                pass
        names = os.listdir(self.root) if os.path.isdir(self.root) else []  # noqa: ASYNC240 - one stat of a local dir
        return {name: CrunContainer(id=name, status="unknown") for name in names}


def _kill_run(argv: list[str]) -> None:
    """SIGKILL ``crun run`` and every process it started (its hooks, the container's half-made
    init). ``run --detach`` forks and setsid()s itself away from the process the agent spawned,
    so neither that process's children nor its group reach them: they are found by their
    command line, unique by its crun root and container id. Each is stopped before its
    children are listed, so none forks past the kill."""
    stopped: dict[int, psutil.Process] = {}
    todo = [proc for proc in psutil.process_iter(["cmdline"]) if proc.info["cmdline"] == argv]
    while todo:
        proc = todo.pop()
        if proc.pid in stopped:
            continue
        try:
            proc.suspend()
            stopped[proc.pid] = proc
            todo.extend(proc.children())
        except psutil.NoSuchProcess:
            pass
    for proc in stopped.values():
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
