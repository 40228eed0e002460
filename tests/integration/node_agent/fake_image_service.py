"""A fake image-service for node-side tests: the subset of image-service a node uses (chunk
indexes, chunks, blobs, environments), serving what its chunk store holds (built with the real
chunking code), with request counts and faults (down, tampered chunks)."""

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from corral_common.contracts.images import Environment, EnvironmentLayer
from corral_image_service.chunks.store import LocalChunkStore, chunk_blob
from corral_image_service.layers.erofs import mkfs_erofs

CHUNK = 64 * 1024


class ServedLayer(EnvironmentLayer):
    """A layer as an environment lists it, with the chunk index the fake serves for it."""

    index: dict


class FakeImageService:
    """The subset of image-service a node uses, with request counts and faults."""

    def __init__(self, work: str):
        self.work = work
        self.blobs: dict[str, str] = {}
        self.store = LocalChunkStore(f"{work}/chunkstore")
        self.store.ensure_dirs()
        self.calls: list[str] = []
        self.down = False
        self.tamper: set[str] = set()  # chunk digests answered with wrong bytes
        self.environments: dict[str, list[ServedLayer]] = {}  # name -> layers, base first

    def add_tree(self, name: str, tree: str) -> ServedLayer:
        """Serve ``tree`` as a base layer (EROFS, chunked) named ``name``."""
        blob = f"{self.work}/{name}.erofs"
        mkfs_erofs(tree, blob)
        with open(blob, "rb") as fh:
            digest = "sha256:" + hashlib.sha256(fh.read()).hexdigest()
        self.blobs[digest] = blob
        index, _ = chunk_blob(self.store, digest, blob, CHUNK)
        return ServedLayer(kind="base", name=name, version="1", digest=digest, size=index["size"], index=index)

    def chunk_requests(self) -> list[str]:
        """Requests for chunks: one by digest, or a run of a layer's (read-ahead)."""
        return [c for c in self.calls if c.startswith("/v1/chunks/") or "/chunks?" in c]

    def answer(self, path: str) -> tuple[int, bytes]:
        self.calls.append(path)
        if self.down:
            return 503, b""
        if path.startswith("/v1/chunks/"):
            d = path.removeprefix("/v1/chunks/")
            p = self.store.chunk_path(d)
            if p is None:
                return 404, b""
            data = p.read_bytes()
            if d in self.tamper:
                data = b"\0" + data[1:]
            return 200, data
        if path.startswith("/v1/indexes/") and "/chunks?" in path:
            digest, query = path.removeprefix("/v1/indexes/").split("/chunks?")
            q = dict(p.split("=") for p in query.split("&"))
            start, count = int(q["start"]), int(q["count"])
            run = self.store.get_index(digest)["chunks"][start:start + count]
            data = [self.store.chunk_path(d).read_bytes() for d in run]
            return 200, b"".join(b"\0" + c[1:] if d in self.tamper else c for d, c in zip(run, data, strict=True))
        if path.startswith("/v1/indexes/"):
            index = self.store.get_index(path.removeprefix("/v1/indexes/"))
            return (200, json.dumps(index).encode()) if index else (404, b"")
        if path.startswith("/v1/environments/"):
            name = path.removeprefix("/v1/environments/").partition("?")[0]
            if name in self.environments:
                layers = [EnvironmentLayer.model_validate(layer.model_dump()) for layer in self.environments[name]]
                return 200, Environment(name=name, layers=tuple(layers)).model_dump_json().encode()
        if path.startswith("/v1/blobs/"):
            d = path.removeprefix("/v1/blobs/")
            if d in self.blobs:
                with open(self.blobs[d], "rb") as fh:
                    return 200, fh.read()
        return 404, b""

    def serve(self) -> ThreadingHTTPServer:
        svc = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):  # noqa: N802 - the stdlib's name
                status, body = svc.answer(self.path)
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        return server
