"""The lazy-layer server: the FUSE filesystem of lazily loaded layers, in a process of its own.

A sandbox on lazy layers reads through this process until it ends; the node-agent only
starts it, tells it about layers and mounts EROFS from its files. So an agent restart (even
a SIGKILL) leaves every adopted sandbox able to read blocks it never read before.

Under the agent's layers root (the node's state dir):

lazy/<hex>           the FUSE file of a layer, mounted in this server's own mount namespace
                     (the agent reaches it as /proc/<pid>/root/<layers>/lazy/<hex>)
chunks/...           the node-wide chunk cache (``chunks``), owned by this process
lazy-server.sock     control socket: JSON lines (``control``)
lazy-server.lock     flock held for this process's life: one server per node
lazy-server.log      its log

Mount namespace: the agent's own is private and must vanish with it (its mounts would
otherwise outlive it); this process is started from the namespace the agent started in
(``--namespace-fd``) and makes a private one of its own there, so its FUSE mount vanishes
with it and it pins none of the agent's mounts.

Lifetime follows the kernel's own references, so no agent decision can race a restart: a
chunk is pinned while its layer's file is open (every EROFS mount and QEMU holds it open
for as long as it lives, in whatever namespace), and the server exits once no agent is
connected and no file is open. A killed server aborts its FUSE connection: readers get EIO,
never a hang, and the agent, whose connection ends, fails the sandboxes on it.

Ops (one JSON object a line, one reply a line): ``watch`` (this connection then carries
``{"event": "fault", ...}`` lines), ``add`` (register a layer and fetch its superblock
chunk), ``fill`` (fetch a layer's missing chunks, ``wait`` or in the background),
``stats``, ``drop_memory``.
"""

import argparse
import dataclasses
import fcntl
import json
import os
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from corral_common.contracts.images import INTERNAL_TOKEN_HEADER
from corral_common.logging import configure_logging, get_logger
from corral_host import namespaces
from corral_node_agent.layers.lazy.chunks import ChunkCache, ChunkIndex, ChunkUnavailable
from corral_node_agent.layers.lazy.fetch import ChunkClient
from corral_node_agent.layers.lazy.lazyfs import LayerFile, LazyFS

log = get_logger(__name__)

SOCKET, LOCK, LOG = "lazy-server.sock", "lazy-server.lock", "lazy-server.log"
# A server nobody connected to (its agent died right after starting it) gives up this late.
UNCLAIMED_EXIT_S = 60.0


def stats_dict(cache: ChunkCache) -> dict[str, Any]:
    s = dataclasses.asdict(cache.stats)
    s["fetched_digests"] = dict(cache.stats.fetched_digests)
    return s


class LayerServer:
    def __init__(self, root: str, config: dict[str, Any]):
        self.root = root
        deadline = float(config["fetch_deadline_s"])
        token = config.get("internal_token") or ""
        self.http = ChunkClient(config["image_service_url"], {INTERNAL_TOKEN_HEADER: token} if token else {},
                                timeout_s=min(10.0, deadline), connect_timeout_s=min(2.0, deadline))
        self.chunks = ChunkCache(f"{root}/chunks", self.http.fetch, max_bytes=int(config["cache_mb"]) * 1024 * 1024,
                                 deadline_s=deadline)
        self.fs = LazyFS(f"{root}/lazy", self._read, workers=16, on_use=self._on_use)
        self.indexes: dict[str, ChunkIndex] = {}
        self._lock = threading.Lock()
        self._conns = 0
        self._used = 0  # layer files open now
        self._watchers: dict[socket.socket, threading.Lock] = {}
        self._closing = False
        self.done = threading.Event()
        self.listener: socket.socket | None = None

    # ---- chunks and reads (FUSE worker threads) -----------------------------------------

    def _read(self, f: LayerFile, offset: int, size: int) -> bytes:
        try:
            return self.chunks.read(f.index, offset, size)
        except ChunkUnavailable as exc:
            self._publish({"event": "fault", "digest": f.index.digest, "error": str(exc)})
            raise

    def _on_use(self, f: LayerFile, used: bool) -> None:
        # Called under the filesystem's lock, in open/release order.
        if used:
            self.chunks.pin(f.index)
        else:
            self.chunks.unpin(f.index)
        with self._lock:
            self._used += 1 if used else -1
        if not used:
            self._exit_if_unused()

    def _publish(self, event: dict) -> None:
        line = (json.dumps(event) + "\n").encode()
        with self._lock:
            watchers = list(self._watchers.items())
        for conn, wlock in watchers:
            try:
                with wlock:
                    conn.sendall(line)
            except OSError:
                pass

    # ---- lifetime -----------------------------------------------------------------------

    def _exit_if_unused(self) -> None:
        with self._lock:
            if self._closing or self._conns or self._used:
                return
            # Decided under the lock the accept loop takes: a connection accepted from now
            # on is closed unanswered (its agent starts the next server).
            self._closing = True
        log.info("lazy_server.exiting", reason="no agent connected and no layer file open")
        self.done.set()

    def serve(self, sock: socket.socket) -> None:
        self.listener = sock
        threading.Thread(target=self._accept, daemon=True, name="lazy-server-accept").start()
        threading.Timer(UNCLAIMED_EXIT_S, self._exit_if_unused).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()  # type: ignore[union-attr]
            except OSError:
                return
            with self._lock:
                if self._closing:
                    conn.close()
                    continue
                self._conns += 1
            threading.Thread(target=self._connection, args=(conn,), daemon=True, name="lazy-server-conn").start()

    def _connection(self, conn: socket.socket) -> None:
        wlock = threading.Lock()
        try:
            with conn, conn.makefile("rb") as rfile:
                for line in rfile:
                    try:
                        req = json.loads(line)
                        reply = self._do(conn, wlock, req)
                    except Exception as exc:  # noqa: BLE001 - a bad request gets an error reply
                        log.exception("lazy_server.request_failed")
                        reply = {"error": f"{type(exc).__name__}: {exc}"}
                    with wlock:
                        conn.sendall((json.dumps(reply) + "\n").encode())
        except OSError:
            pass
        finally:
            with self._lock:
                self._watchers.pop(conn, None)
                self._conns -= 1
            self._exit_if_unused()

    def _do(self, conn: socket.socket, wlock: threading.Lock, req: dict) -> dict:
        op = req.get("op")
        if op == "watch":
            with self._lock:
                self._watchers[conn] = wlock
            return {"pid": os.getpid()}
        if op == "add":
            return self._add(req)
        if op == "fill":
            index = self.indexes[req["digest"]]
            if req.get("wait"):
                self._fill(index)
            else:
                threading.Thread(target=self.chunks.prefetch, args=(index,), daemon=True,
                                 name="lazy-server-prefetch").start()
            return {}
        if op == "stats":
            held = {d: sum(i.span(n)[1] for n, c in enumerate(i.chunks) if self.chunks.cached(c))
                    for d, i in list(self.indexes.items())}
            return {"stats": stats_dict(self.chunks), "held": held}
        if op == "drop_memory":
            self.chunks.drop_memory()
            return {}
        return {"error": f"unknown op {op!r}"}

    def _add(self, req: dict) -> dict:
        index = ChunkIndex(digest=req["digest"], size=int(req["size"]), chunk_size=int(req["chunk_size"]),
                           chunks=tuple(req["chunks"]))
        known = self.indexes.setdefault(index.digest, index)
        self.fs.add(index.digest.removeprefix("sha256:"), known.size, known)
        try:
            # Mounting reads the superblock: have its chunk first, so a sandbox is refused up
            # front (image_unavailable) when image-service cannot serve it.
            self.chunks.get(known, 0)
        except OSError as exc:
            return {"error": exc.strerror or str(exc)}
        return {}

    def _fill(self, index: ChunkIndex) -> None:
        missing = [i for i, h in enumerate(index.chunks) if not self.chunks.cached(h)]
        with ThreadPoolExecutor(max_workers=8, thread_name_prefix="lazy-server-fill") as pool:
            for _ in pool.map(lambda i: self.chunks.get(index, i), missing):
                pass

    def close(self) -> None:
        self.chunks.stopping.set()
        if self.listener is not None:
            self.listener.close()
        try:
            os.unlink(f"{self.root}/{SOCKET}")
        except FileNotFoundError:
            pass
        self.fs.stop()
        self.http.close()


def _lock(root: str, timeout_s: float = 30.0) -> int:
    """The node's server lock; a server on its way out (after its last user) holds it a
    moment longer, so wait a while rather than fail."""
    fd = os.open(f"{root}/{LOCK}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise OSError(f"another lazy-layer server holds {root}/{LOCK}") from None
            time.sleep(0.05)  # polling a lock another process holds; not test synchronisation


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="corral_node_agent.layers.lazy.server_main")
    parser.add_argument("root", help="the node-agent's layers directory")
    parser.add_argument("--namespace-fd", type=int, default=None,
                        help="mount namespace to make ours in (the one the agent started in)")
    args = parser.parse_args(argv)
    config = json.loads(sys.stdin.readline())  # not argv: it carries the internal token
    root = os.path.abspath(args.root)
    # Detach from the agent: not its child (it never reaps us), not in its session.
    if os.fork():
        os._exit(0)
    os.setsid()
    os.chdir("/")
    os.umask(0o077)  # the control socket is the agent's alone (root), from its bind on
    configure_logging(f"lazy-server:{config.get('node_id', '')}", config.get("log_level", "info"),
                      bool(config.get("log_json", False)))
    try:
        namespaces.private_mount_namespace(args.namespace_fd)
        if args.namespace_fd is not None:
            os.close(args.namespace_fd)
        lock_fd = _lock(root)
        server = LayerServer(root, config)
        server.fs.start()
        path = f"{root}/{SOCKET}"
        try:
            os.unlink(path)  # a crashed server's
        except FileNotFoundError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        sock.bind(path)
        sock.listen(64)
    except Exception as exc:
        print(f"failed {type(exc).__name__}: {exc}", flush=True)
        raise
    server.serve(sock)
    log.info("lazy_server.started", pid=os.getpid(), root=root)
    print(f"ready {os.getpid()}", flush=True)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)
    os.dup2(devnull, 0)
    server.done.wait()
    server.close()
    os.close(lock_fd)
    os._exit(0)


if __name__ == "__main__":
    main()
