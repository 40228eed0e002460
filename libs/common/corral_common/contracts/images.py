"""What image-service answers, as the api and the node-agents read it, and the one client for it.

The models are the callers' view of image-service's response schemas
(``corral_image_service/{environments,disk_images,chunks}/schemas.py``): the same field
names, only the fields a caller reads, anything else ignored, so image-service can grow a
reply without breaking an older node. ``tests/unit/common/test_contracts_images.py`` fails
when a field here no longer exists there.

The client escapes a name as exactly one path segment (``quote(safe="")``, and ``.``/``..``
as ``%2E``, which httpx would otherwise resolve): ``a/b``, ``x?y`` or a name with a control
character asks for that name, which does not exist, never for another resource (unescaped,
``busybox?x`` asked for ``busybox``). Digests are sent as they are: the models only let
``sha256:<64 hex>`` through. It sends the internal token when it has one and turns every
failure into an ``ImageServiceError``; what a failure means to a user (a 422, a 503, a
sandbox failed with ``image_unavailable``) is each caller's business.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator

from corral_common.inputs import ProcessCwd, ProcessEnv
from corral_common.web.internal import INTERNAL_TOKEN_HEADER

DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
Digest = Annotated[str, StringConstraints(pattern=DIGEST_PATTERN)]
# EROFS reads in blocks of 4 KiB: a chunk boundary must fall on one.
EROFS_BLOCK = 4096


def digest_hex(digest: str) -> str:
    """The 64 hex digits of a ``sha256:<hex>`` digest."""
    return digest.removeprefix("sha256:")


class _Reply(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class EnvironmentLayer(_Reply):
    kind: str
    name: str
    version: str
    digest: Digest
    size: int


class Environment(_Reply):
    name: str
    # Mount order for an overlay: base first, then workspace, toolkit and diff layers on top.
    layers: tuple[EnvironmentLayer, ...]
    # The tenant it belongs to ("" = the operator's shared catalogue).
    owner: str = ""
    # What its sandboxes start with (env, cwd, user, entrypoint, cmd, exposed_ports, labels);
    # read by the api at create, never by a node.
    config: dict[str, Any] | None = None


class ResolvedImage(BaseModel):
    """An environment as the api resolved it for one create: what the sandbox is validated
    against, placed by (layer locality, warm pool shape) and started on, whatever the name
    points at later. Written by the api only, from image-service's answer for the sandbox's
    tenant, onto the record and ``sandbox.requested`` (never a field of a request body); the
    scheduler and the node read it instead of resolving the name again (E2B pins a build id
    the same way)."""

    model_config = ConfigDict(frozen=True)

    name: str
    # Mount order, base first (Environment.layers).
    layers: tuple[EnvironmentLayer, ...]
    owner: str = ""
    config: dict[str, Any] | None = None

    @classmethod
    def of(cls, environment: Environment) -> "ResolvedImage":
        return cls(name=environment.name, layers=environment.layers, owner=environment.owner,
                   config=environment.config)

    @property
    def digests(self) -> tuple[str, ...]:
        return tuple(layer.digest for layer in self.layers)


class DiskImage(_Reply):
    name: str
    version: str
    digest: Digest  # GET /v1/blobs/{digest} serves the file
    format: Literal["qcow2", "raw"]  # corral_common.disk_images.DISK_IMAGE_FORMATS


class ChunkIndex(_Reply):
    """How image-service cut a blob into chunks: chunk i covers
    ``[i*chunk_size, min(size, (i+1)*chunk_size))`` and is served by ``GET /v1/chunks/{chunks[i]}``."""

    digest: Digest  # the whole blob's
    size: int = Field(gt=0)
    chunk_size: int = Field(gt=0, multiple_of=EROFS_BLOCK)
    chunks: tuple[Digest, ...]

    @model_validator(mode="after")
    def _chunks_cover_the_blob(self) -> "ChunkIndex":
        if len(self.chunks) != -(-self.size // self.chunk_size):
            raise ValueError(f"{len(self.chunks)} chunks of {self.chunk_size} bytes for {self.size} bytes")
        return self


class ImageConfig(BaseModel):
    """What a sandbox of an environment starts with (an OCI image's config, or given when the
    environment is made): defaults of every exec, each overridable per sandbox and per exec.
    image-service stores it with the environment; the api applies it at create."""

    model_config = ConfigDict(extra="forbid")

    env: ProcessEnv = Field(default_factory=dict, description="Environment variables (PATH...)")
    cwd: ProcessCwd = Field(None, max_length=4096, pattern=r"^/", description="Working directory of execs (absolute)")
    user: str | None = Field(None, max_length=11, pattern=r"^[0-9]{1,5}(:[0-9]{1,5})?$",
                             description="uid[:gid] execs run as inside the sandbox (user names resolved at import)")
    entrypoint: list[str] = Field(default_factory=list, max_length=256)
    cmd: list[str] = Field(default_factory=list, max_length=256)
    exposed_ports: list[str] = Field(default_factory=list, max_length=256)
    labels: dict[str, str] = Field(default_factory=dict, max_length=512)


class ImageServiceError(Exception):
    """image-service gave no usable answer."""


class ImageServiceUnreachable(ImageServiceError):
    def __init__(self, cause: httpx.HTTPError):
        # (a timeout's str() is empty: its class is what says what happened)
        super().__init__(f"image-service unreachable: {cause.__class__.__name__}" + (f": {cause}" if str(cause) else ""))
        self.cause = cause


class UnexpectedStatus(ImageServiceError):
    def __init__(self, status_code: int):
        super().__init__(f"image-service answered {status_code}")
        self.status_code = status_code


class ImageNotFound(UnexpectedStatus):
    """404: no such environment, disk image, blob, index or chunk."""

    def __init__(self) -> None:
        super().__init__(404)


class MalformedReply(ImageServiceError):
    """A 200 whose body is not what the contract says."""


def path_segment(name: str) -> str:
    segment = quote(name, safe="")
    return segment.replace(".", "%2E") if segment in (".", "..") else segment


def _check(response: httpx.Response) -> None:
    if response.status_code == 404:
        raise ImageNotFound()
    if response.status_code != 200:
        raise UnexpectedStatus(response.status_code)


Reply = TypeVar("Reply", bound=_Reply)


class ImageServiceClient:
    def __init__(self, base_url: str, *, internal_token: str = "", timeout: httpx.Timeout | float = 30.0,
                 limits: httpx.Limits | None = None, transport: httpx.AsyncBaseTransport | None = None):
        headers = {INTERNAL_TOKEN_HEADER: internal_token} if internal_token else {}
        options: dict[str, Any] = {"limits": limits} if limits is not None else {}
        self._http = httpx.AsyncClient(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout,
                                       transport=transport, **options)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def environment(self, name: str, owner: str = "") -> Environment:
        """Environment ``name`` as tenant ``owner`` sees it: its own, else the shared one."""
        params = {"owner": owner} if owner else None
        return await self._get_model(f"/v1/environments/{path_segment(name)}", Environment, params=params)

    async def disk_image(self, name: str, version: str = "") -> DiskImage:
        """The latest version of disk image ``name``, or ``version`` of it."""
        url = f"/v1/disk-images/{path_segment(name)}" + (f"/{path_segment(version)}" if version else "")
        return await self._get_model(url, DiskImage)

    async def chunk_index(self, digest: str) -> ChunkIndex:
        index = await self._get_model(f"/v1/indexes/{digest}", ChunkIndex)
        if index.digest != digest:
            raise MalformedReply(f"image-service sent the chunk index of {index.digest} for {digest}")
        return index

    async def chunk(self, digest: str) -> bytes:
        return (await self._get(f"/v1/chunks/{digest}")).content

    async def download_blob(self, digest: str, write: Callable[[bytes], Awaitable[None]]) -> None:
        """Stream blob ``digest`` into ``write``, a piece of up to 1 MiB at a time."""
        try:
            async with self._http.stream("GET", f"/v1/blobs/{digest}") as response:
                _check(response)
                async for piece in response.aiter_bytes(1 << 20):
                    await write(piece)
        except httpx.HTTPError as exc:
            raise ImageServiceUnreachable(exc) from exc

    async def _get(self, url: str, params: dict[str, str] | None = None) -> httpx.Response:
        try:
            response = await self._http.get(url, params=params)
        except httpx.HTTPError as exc:
            raise ImageServiceUnreachable(exc) from exc
        _check(response)
        return response

    async def _get_model(self, url: str, model: type[Reply], params: dict[str, str] | None = None) -> Reply:
        response = await self._get(url, params)
        try:
            return model.model_validate_json(response.content)
        except ValidationError as exc:
            raise MalformedReply(f"image-service sent a malformed {model.__name__} for {url}: "
                                 f"{exc.errors()[0]['msg']}") from exc


class EnvironmentCache:
    """Environments by name, each remembered ``ttl_s`` after image-service returned it.

    An environment's layers never change (image-service answers 409 to a redefinition), so
    a burst of creates asks image-service once: concurrent misses of one name share one
    request, and when a refresh finds image-service unreachable or failing (a timeout or a
    5xx under load), the answer it had stands in, up to ``stale_s`` past its expiry (measured: at 7,500
    sandboxes on one host, the 60 s expiry sent a burst's creates to a loaded image-service at
    once, and 7 of 500 failed image_unavailable). A definite answer (404, a malformed reply)
    is never covered up, and failures are not remembered.
    """

    def __init__(self, client: ImageServiceClient, ttl_s: float, stale_s: float = 600.0):
        self.client = client
        self.ttl_s = ttl_s
        self.stale_s = stale_s
        self._known: dict[tuple[str, str], tuple[float, Environment]] = {}
        self._asking: dict[tuple[str, str], asyncio.Future[Environment]] = {}

    async def get(self, name: str, owner: str = "") -> Environment:
        key = (owner, name)
        cached = self._known.get(key)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        asking = self._asking.get(key)
        if asking is None:
            asking = self._asking[key] = asyncio.ensure_future(self._ask(key))
            asking.add_done_callback(lambda done: self._asked(key, done))
        try:
            return await asyncio.shield(asking)  # one caller cancelled does not cancel the others'
        except (ImageServiceUnreachable, UnexpectedStatus) as exc:
            transient = not isinstance(exc, UnexpectedStatus) or exc.status_code >= 500 or exc.status_code == 429
            if transient and cached is not None and time.monotonic() - cached[0] < self.stale_s:
                return cached[1]
            raise

    async def _ask(self, key: tuple[str, str]) -> Environment:
        owner, name = key
        environment = await self.client.environment(name, owner)
        self._known[key] = (time.monotonic() + self.ttl_s, environment)
        return environment

    def _asked(self, key: tuple[str, str], done: asyncio.Future) -> None:
        if self._asking.get(key) is done:
            del self._asking[key]
        if not done.cancelled():
            done.exception()  # retrieved: every waiter may have gone

    def forget(self, name: str, owner: str = "") -> None:
        """Drop a cached answer (the api after a tenant deleted or replaced the environment)."""
        self._known.pop((owner, name), None)
