"""The node-agent's end of the lazy-layer server (``server``): find the running one or start
it, ask it things, and learn when it reports a fault or dies.

Blocking code (worker threads). One ``watch`` connection stays open for as long as the
agent uses the server: it is what keeps an unused server alive, carries its fault events,
and its end (EOF) is how a crashed server is noticed. Requests go on short connections of
their own, each with a timeout: a wedged server fails a request, never hangs the agent.
"""

import json
import select
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

from corral_common.logging import get_logger
from corral_host import namespaces
from corral_node_agent.layers.lazy.server_main import LOG, SOCKET

log = get_logger(__name__)

START_TIMEOUT_S = 30.0


class ServerUnavailable(OSError):
    pass


class LayerServerClient:
    def __init__(self, root: str, config: dict[str, Any], *, on_event: Callable[[dict], None],
                 on_exit: Callable[[int], None]):
        self.root = root
        self.socket_path = f"{root}/{SOCKET}"
        self.config = config
        self.on_event = on_event
        self.on_exit = on_exit
        self.pid: int | None = None
        # Whether this agent run started a server (found none to attach to): a sandbox started
        # before this agent ran read its lazy layers from one that is gone.
        self.started_one = False
        self._watch: socket.socket | None = None
        self._lock = threading.Lock()

    # ---- connecting ---------------------------------------------------------------------

    def ensure(self) -> int:
        """The running server's pid, started first if there is none (idempotent)."""
        with self._lock:
            if self._watch is not None and self.pid is not None:
                return self.pid
            for attempt in range(3):
                try:
                    return self._attach()
                except ServerUnavailable:
                    if attempt == 2:
                        raise
                self._spawn()
            raise ServerUnavailable("unreachable")

    def _attach(self) -> int:
        try:
            sock = self._connect(timeout=5.0)
            sock.sendall(b'{"op": "watch"}\n')
            reply = self._read_line(sock, timeout=5.0)
        except OSError as exc:
            raise ServerUnavailable(f"lazy-layer server: {exc}") from exc
        if reply is None or "pid" not in reply:
            sock.close()
            raise ServerUnavailable(f"lazy-layer server: refused the watch ({reply})")
        sock.settimeout(None)
        self._watch, self.pid = sock, int(reply["pid"])
        threading.Thread(target=self._watch_events, args=(sock, self.pid), daemon=True,
                         name="corral-lazy-watch").start()
        log.info("lazy_server.attached", pid=self.pid)
        return self.pid

    def _spawn(self) -> None:
        ns = namespaces.original_mount_namespace()
        args = [sys.executable, "-m", "corral_node_agent.layers.lazy.server_main", self.root]
        if ns is not None:
            args += ["--namespace-fd", str(ns)]
        with open(f"{self.root}/{LOG}", "ab") as logf:
            proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=logf,
                                    pass_fds=(ns,) if ns is not None else (), cwd="/", start_new_session=True)
        try:
            proc.stdin.write((json.dumps(self.config) + "\n").encode())  # type: ignore[union-attr]
            proc.stdin.close()  # type: ignore[union-attr]
            ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
            line = proc.stdout.readline().decode(errors="replace").strip() if ready else "no answer"  # type: ignore[union-attr]
        finally:
            proc.stdout.close()  # type: ignore[union-attr]
            proc.wait(timeout=START_TIMEOUT_S)  # the launcher forks the server and exits at once
        if not line.startswith("ready"):
            raise ServerUnavailable(f"lazy-layer server did not start: {line or 'exited'} (see {self.root}/{LOG})")
        log.info("lazy_server.started", pid=int(line.split()[1]))
        self.started_one = True

    def _connect(self, timeout: float) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        sock.settimeout(timeout)
        try:
            sock.connect(self.socket_path)
        except OSError:
            sock.close()
            raise
        return sock

    @staticmethod
    def _read_line(sock: socket.socket, timeout: float) -> dict | None:
        sock.settimeout(timeout)
        buf = b""
        while not buf.endswith(b"\n"):
            piece = sock.recv(65536)
            if not piece:
                return None
            buf += piece
        return json.loads(buf)

    def _watch_events(self, sock: socket.socket, pid: int) -> None:
        buf = b""
        while True:
            try:
                piece = sock.recv(65536)
            except OSError:
                piece = b""
            if not piece:
                break
            buf += piece
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line:
                    self.on_event(json.loads(line))
        with self._lock:
            # Not ours any more (``close``): an ending we asked for.
            current = self._watch is sock
            if current:
                self._watch, self.pid = None, None
        sock.close()
        if current:
            log.error("lazy_server.exited", pid=pid)
            self.on_exit(pid)

    # ---- requests -----------------------------------------------------------------------

    def request(self, op: str, *, timeout: float = 30.0, **fields: Any) -> dict:
        """One request; raises ServerUnavailable when the server cannot answer, OSError with
        its message when it answers with an error."""
        try:
            with self._connect(timeout=timeout) as sock:
                sock.sendall((json.dumps({"op": op, **fields}) + "\n").encode())
                reply = self._read_line(sock, timeout=timeout)
        except OSError as exc:
            raise ServerUnavailable(f"lazy-layer server: {op}: {exc}") from exc
        if reply is None:
            raise ServerUnavailable(f"lazy-layer server: {op}: no answer")
        if "error" in reply:
            raise OSError(reply["error"])
        return reply

    def close(self) -> None:
        """Let go of the server (agent shutdown): it keeps serving the layers still mounted
        (by sandboxes a restarted agent adopts) and exits by itself once none is."""
        with self._lock:
            sock, self._watch, self.pid = self._watch, None, None
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
