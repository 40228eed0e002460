"""The lazy-layer server's HTTP client for chunks: one keep-alive connection per thread.

Stdlib ``http.client``, not httpx: this is the miss path of every lazily loaded layer, and a
512 KiB chunk cost 1.9 ms of client CPU (3.6 ms a request) through httpx's sync client on the
2-core dev host against 0.34 ms (1.4 ms) through ``http.client``, which reads a body of known
length straight into one buffer; image-service also spent less CPU answering the faster reader
(docs/benchmarks.md, "Image loading").

``fetch(index, start, count)`` is one attempt (``chunks.Fetch``): one chunk by its digest
(``GET /v1/chunks/...``, cacheable by any HTTP cache on the way), or a run of the layer's
chunks in one response (``GET /v1/indexes/<layer>/chunks?start=&count=``) cut by the index,
each chunk yielded as soon as its bytes are in. The cache verifies every chunk.
"""

import http.client
import socket
import threading
from collections.abc import Iterator
from urllib.parse import urlencode, urlsplit

from corral_node_agent.layers.lazy.chunks import ChunkIndex


class ChunkFetchError(Exception):
    pass


class _Connection(http.client.HTTPConnection):
    """Connects within ``connect_timeout`` (a dead host fails fast), then reads with ``timeout``."""

    def __init__(self, host: str, port: int | None, timeout: float, connect_timeout: float):
        super().__init__(host, port, timeout=timeout)
        self.connect_timeout = connect_timeout

    def connect(self) -> None:
        self.sock = socket.create_connection((self.host, self.port), self.connect_timeout)
        self.sock.settimeout(self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class ChunkClient:
    def __init__(self, base_url: str, headers: dict[str, str], *, timeout_s: float, connect_timeout_s: float):
        url = urlsplit(base_url)
        self._scheme, self._host, self._port = url.scheme, url.hostname or "127.0.0.1", url.port
        self._prefix = url.path.rstrip("/")
        self.headers = headers
        self.timeout_s, self.connect_timeout_s = timeout_s, connect_timeout_s
        self._local = threading.local()
        self._all: set[http.client.HTTPConnection] = set()
        self._lock = threading.Lock()

    def fetch(self, index: ChunkIndex, start: int, count: int) -> Iterator[bytes]:
        if count == 1:
            resp = self._get(f"/v1/chunks/sha256:{index.chunks[start]}")
            try:
                data = resp.read()
            except BaseException:
                self._drop()
                raise
            yield data
            return
        resp = self._get(f"/v1/indexes/{index.digest}/chunks?" + urlencode({"start": start, "count": count}))
        complete = False
        try:
            for j in range(start, start + count):
                data = resp.read(index.span(j)[1])
                if len(data) < index.span(j)[1]:
                    return  # short: the cache sees fewer chunks than asked
                yield data
            complete = not resp.read(1)
        finally:
            if not complete:  # a body not read to its end leaves the connection unusable
                self._drop()

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self._scheme == "https":
                conn = http.client.HTTPSConnection(self._host, self._port, timeout=self.timeout_s)
            else:
                conn = _Connection(self._host, self._port, self.timeout_s, self.connect_timeout_s)
            self._local.conn = conn
            with self._lock:
                self._all.add(conn)
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            self._local.conn = None
            with self._lock:
                self._all.discard(conn)
            conn.close()

    def _get(self, path: str) -> http.client.HTTPResponse:
        for attempt in (1, 2):
            conn = self._connection()
            reused = conn.sock is not None
            try:
                conn.request("GET", self._prefix + path, headers=self.headers)
                resp = conn.getresponse()
            except TimeoutError:
                self._drop()
                raise
            except (OSError, http.client.HTTPException):
                self._drop()
                if reused and attempt == 1:
                    continue  # the server closed an idle keep-alive connection: once more, fresh
                raise
            if resp.status != 200:
                body = resp.read(4096)
                if not resp.isclosed():
                    self._drop()
                raise ChunkFetchError(f"HTTP {resp.status} for {path}: {body[:200]!r}")
            return resp
        raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            conns, self._all = list(self._all), set()
        for conn in conns:
            conn.close()
