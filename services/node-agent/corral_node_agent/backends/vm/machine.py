"""One QEMU process and its QMP control channel: launch, watch, pause, save, screen, input.

Knows nothing about sandboxes; the backend builds on it and the benchmarks use it bare.
"""

import asyncio
import collections
import contextlib
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from qemu.qmp import ConnectError, QMPClient

from corral_common.logging import get_logger
from corral_node_agent.backends.vm.qemu import BALLOON_ID, MachineConfig, build_argv
from corral_node_agent.errors import RuntimeFailure

log = get_logger(__name__)

CONSOLE_KEEP_BYTES = 64 * 1024


class MachineError(RuntimeFailure):
    """QEMU failed to launch, died, or refused a QMP command."""


class QemuMachine:
    def __init__(self, qemu: str, config: MachineConfig, *, cgroup_procs: list[str] | None = None):
        self.qemu = qemu
        self.config = config
        self.argv = build_argv(qemu, config)
        self.proc: asyncio.subprocess.Process | None = None
        self.qmp: QMPClient | None = None
        self._stats_polling = False  # balloon guest-stats polling turned on over this QMP
        # The guest's serial console, last CONSOLE_KEEP_BYTES only: a guest printing forever
        # costs a bounded amount of host memory and no disk.
        self._console: collections.deque[bytes] = collections.deque()
        self._console_bytes = 0
        self._tasks: list[asyncio.Task] = []
        self.shutdown_reason: str | None = None  # from QMP SHUTDOWN: guest-shutdown, guest-reset...
        self.started_at = 0.0
        self._cgroup_procs = cgroup_procs
        # A QEMU a previous node-agent started (adopted): watched through a pidfd.
        self._adopted_pid: int | None = None
        self._adopted_exit: asyncio.Future | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else self._adopted_pid

    @property
    def running(self) -> bool:
        if self._adopted_exit is not None:
            return not self._adopted_exit.done()
        return self.proc is not None and self.proc.returncode is None

    def console_text(self) -> str:
        return b"".join(self._console).decode(errors="replace")

    # ---- lifecycle ----------------------------------------------------------------------

    async def launch(self, *, timeout_s: float = 30.0) -> None:
        """Start QEMU and connect QMP + the console; the guest boots on."""
        self.started_at = time.monotonic()

        cgroup_procs = self._cgroup_procs

        def enter_cgroup() -> None:
            # Runs in the child before exec: QEMU (and everything it allocates) is accounted
            # and capped by the sandbox's cgroup from its first instruction.
            for procs in cgroup_procs or ():
                with open(procs, "w") as fh:
                    fh.write(str(os.getpid()))

        upper = self._open_upper()
        try:
            argv = build_argv(self.qemu, self.config, upper_fds=upper) if upper else self.argv
            self.proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE, start_new_session=True, preexec_fn=enter_cgroup,
                pass_fds=(*upper, *(() if self.config.net_fd is None else (self.config.net_fd,))))
        finally:
            for fd in upper:
                os.close(fd)
        deadline = time.monotonic() + timeout_s
        try:
            await self._wait_for_socket(self.config.qmp_socket, deadline)
            self.qmp = await self._retry_refused(self._connect_qmp, deadline)
            await self._wait_for_socket(self.config.console_socket, deadline)
            reader, writer = await self._retry_refused(
                lambda: asyncio.open_unix_connection(self.config.console_socket), deadline)
        except BaseException:
            await self.kill()
            raise
        self._tasks.append(asyncio.create_task(self._read_console(reader, writer)))
        self._tasks.append(asyncio.create_task(self._watch_events()))

    def _open_upper(self) -> tuple[int, ...]:
        """The upper disk opened read-write and read-only, for QEMU's fd set (qemu.UPPER_FDSET)."""
        if not self.config.upper_disk:
            return ()
        rw = os.open(self.config.upper_disk, os.O_RDWR | os.O_CLOEXEC)
        try:
            return rw, os.open(self.config.upper_disk, os.O_RDONLY | os.O_CLOEXEC)
        except BaseException:
            os.close(rw)
            raise

    async def _wait_for_socket(self, path: str, deadline: float) -> None:
        # QEMU creates its listening sockets during start-up; nothing to subscribe to, so poll.
        while not os.path.exists(path):  # noqa: ASYNC240 - QEMU creates the socket without telling anyone; one stat per poll
            if self.proc and self.proc.returncode is not None:
                raise MachineError(f"qemu exited with {self.proc.returncode}: {await self._stderr()}")
            if time.monotonic() > deadline:
                raise MachineError(f"qemu did not create {os.path.basename(path)} in time")
            await asyncio.sleep(0.005)

    async def adopt(self, pid: int, *, timeout_s: float = 10.0) -> None:
        """Take over a QEMU that is still running from a previous node-agent (it was started
        in its own session, so the agent's death did not take it along)."""
        loop = asyncio.get_running_loop()
        pidfd = os.pidfd_open(pid)
        self._adopted_pid = pid
        self._adopted_exit = loop.create_future()

        def exited() -> None:
            loop.remove_reader(pidfd)
            os.close(pidfd)
            if not self._adopted_exit.done():
                self._adopted_exit.set_result(-1)  # not our child: no exit status to read

        loop.add_reader(pidfd, exited)
        deadline = time.monotonic() + timeout_s
        try:
            self.qmp = await self._retry_refused(self._connect_qmp, deadline)
            # The console socket takes a new client once the old one is gone.
            reader, writer = await self._retry_refused(
                lambda: asyncio.open_unix_connection(self.config.console_socket), deadline)
        except BaseException:
            await self.close_channels()
            raise
        self._tasks.append(asyncio.create_task(self._read_console(reader, writer)))
        self._tasks.append(asyncio.create_task(self._watch_events()))

    async def _connect_qmp(self) -> QMPClient:
        qmp = QMPClient(f"qemu-{self.pid}")
        await qmp.connect(self.config.qmp_socket)
        return qmp

    async def _retry_refused(self, connect: Callable[[], Any], deadline: float) -> Any:
        # The socket file appears at bind(), a moment before QEMU listen()s on it.
        while True:
            try:
                return await connect()
            except (ConnectionError, ConnectError) as exc:
                if not self.running:
                    raise MachineError(f"qemu exited: {await self._stderr()}") from exc
                if time.monotonic() > deadline:
                    raise MachineError(f"cannot connect to qemu: {exc}") from exc
                await asyncio.sleep(0.01)

    async def _stderr(self) -> str:
        if self.proc is None or self.proc.stderr is None:
            return ""
        with contextlib.suppress(Exception):
            data = await asyncio.wait_for(self.proc.stderr.read(4096), 1.0)
            return data.decode(errors="replace").strip()
        return ""

    async def _read_console(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                data = await reader.read(4096)
                if not data:
                    return
                self._console.append(data)
                self._console_bytes += len(data)
                while self._console_bytes > CONSOLE_KEEP_BYTES and len(self._console) > 1:
                    self._console_bytes -= len(self._console.popleft())
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            writer.close()

    async def _watch_events(self) -> None:
        assert self.qmp is not None
        try:
            with self.qmp.listener(("SHUTDOWN",)) as listener:
                async for event in listener:
                    self.shutdown_reason = event.get("data", {}).get("reason", "unknown")
        except (asyncio.CancelledError, Exception):  # noqa: BLE001 - closing QMP of a dead QEMU: nothing to report
            return

    async def wait(self) -> int:
        if self._adopted_exit is not None:
            return await asyncio.shield(self._adopted_exit)
        assert self.proc is not None
        return await self.proc.wait()

    async def kill(self) -> None:
        """SIGKILL QEMU and release the control channels; idempotent."""
        if self.running and self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                await self.wait()
        await self.close_channels()

    async def close_channels(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._tasks.clear()
        if self.qmp is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.qmp.disconnect(), 2.0)
            self.qmp = None

    async def quit(self, timeout_s: float = 5.0) -> None:
        """Ask QEMU to exit (no guest shutdown), kill it if it does not."""
        if self.qmp is not None and self.running:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.qmp.execute("quit"), timeout_s)
        if self.pid is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.wait(), timeout_s)
        await self.kill()

    # ---- control ------------------------------------------------------------------------

    async def execute(self, command: str, arguments: dict[str, Any] | None = None) -> Any:
        if self.qmp is None:
            raise MachineError("the VM is not running")
        return await self.qmp.execute(command, arguments)

    async def balloon_stats(self, polling_interval_s: int = 2) -> tuple[int, dict[str, Any]]:
        """(bytes the guest has now, the guest's last balloon stats report). Stats stay at their
        boot values until polling is on: the first call turns it on (then a report arrives
        every ``polling_interval_s``)."""
        path = f"/machine/peripheral/{BALLOON_ID}"
        if not self._stats_polling:
            await self.execute("qom-set", {"path": path, "property": "guest-stats-polling-interval",
                                           "value": polling_interval_s})
            self._stats_polling = True
        actual = (await self.execute("query-balloon"))["actual"]
        stats = await self.execute("qom-get", {"path": path, "property": "guest-stats"})
        return int(actual), stats

    async def set_balloon(self, target_bytes: int) -> None:
        """Ask the guest to give back all but ``target_bytes`` (QEMU caps it at the VM's RAM)."""
        await self.execute("balloon", {"value": int(target_bytes)})

    async def pause(self) -> None:
        await self.execute("stop")

    async def resume(self) -> None:
        await self.execute("cont")

    async def status(self) -> str:
        return (await self.execute("query-status"))["status"]

    async def screendump(self, path: str) -> None:
        """Save the screen as a PNG at path. QEMU runs as an unprivileged uid that may not
        reach path, so it writes to a file descriptor we open and hand over (an fdset)."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            assert self.qmp is not None
            self.qmp.send_fd_scm(fd)
            fdset = (await self.execute("add-fd"))["fdset-id"]
        finally:
            os.close(fd)
        try:
            await self.execute("screendump", {"filename": f"/dev/fdset/{fdset}", "format": "png"})
        finally:
            with contextlib.suppress(Exception):
                await self.execute("remove-fd", {"fdset-id": fdset})

    async def send_input(self, events: list[dict[str, Any]]) -> None:
        await self.execute("input-send-event", {"events": events})

    async def save_state(self, path: str, *, timeout_s: float = 300.0) -> None:
        """Write the VM's device + memory state to path (the VM must be stopped).

        Migration to an fd we pass over QMP: QEMU's seccomp filter forbids it to spawn
        `cat`, and it never opens a host path we did not choose."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            await self._pass_fd(fd, "snapshot")
            await self.execute("migrate", {"uri": "fd:snapshot"})
        finally:
            os.close(fd)
        await self._wait_migration(timeout_s)

    async def load_state(self, path: str, *, timeout_s: float = 300.0) -> None:
        """Feed a saved state to a QEMU started with `-incoming defer`; leaves it paused."""
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            await self._pass_fd(fd, "snapshot")
            await self.execute("migrate-incoming", {"uri": "fd:snapshot"})
        finally:
            os.close(fd)
        deadline = time.monotonic() + timeout_s
        while (await self.status()) in ("inmigrate", "restore-vm"):
            if time.monotonic() > deadline:
                raise MachineError("restoring the snapshot timed out")
            await asyncio.sleep(0.02)

    async def _pass_fd(self, fd: int, name: str) -> None:
        assert self.qmp is not None
        self.qmp.send_fd_scm(fd)
        await self.execute("getfd", {"fdname": name})

    async def _wait_migration(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            info = await self.execute("query-migrate")
            status = info.get("status")
            if status == "completed":
                return
            if status in ("failed", "cancelled"):
                raise MachineError(f"saving the VM state failed: {info.get('error-desc', status)}")
            if time.monotonic() > deadline:
                with contextlib.suppress(Exception):
                    await self.execute("migrate_cancel")
                raise MachineError("saving the VM state timed out")
            await asyncio.sleep(0.02)
