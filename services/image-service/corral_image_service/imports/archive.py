"""What an image archive holds: a ``docker save`` tarball (``manifest.json``) or an OCI
image layout (``oci-layout`` + ``index.json`` + ``blobs/``), as a tarball or a directory
(skopeo's ``oci:DIR`` output for registry pulls).

``read_archive`` only reads the small JSON documents and checks that every blob they name
is there (a missing one is a 422 before any job starts); ``open_blob`` then streams a blob
while hashing it, so a layer whose bytes do not match its digest is refused as it is read.
"""

import hashlib
import json
import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from corral_common.web.errors import Unprocessable

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
# Layer media types and how their bytes are compressed.
LAYER_TYPES = {
    "application/vnd.oci.image.layer.v1.tar": "tar",
    "application/vnd.oci.image.layer.v1.tar+gzip": "gzip",
    "application/vnd.oci.image.layer.v1.tar+zstd": "zstd",
    "application/vnd.docker.image.rootfs.diff.tar.gzip": "gzip",
    "application/vnd.docker.image.rootfs.diff.tar": "tar",
}
MAX_JSON = 4 * 1024 * 1024


# An OCI layout or docker-archive holds its index, manifests, configs and layer blobs: a few
# files per layer (127 layers at most in Docker). Past this it is something else, and tarfile
# keeps every header in memory.
MAX_ARCHIVE_ENTRIES = 10_000


def bad(message: str, code: str = "invalid_image", *loc: str | int) -> Unprocessable:
    return Unprocessable(message, loc=["body", *loc], code=code)


@dataclass
class LayerRef:
    source: str  # member name (tarball) or path (directory)
    digest: str | None  # sha256:<hex> of the stored bytes, when the format names it
    compression: str | None  # "tar", "gzip", "zstd"; None (docker-archive): sniffed from the bytes
    size: int | None = None


@dataclass
class ImageArchive:
    format: str  # "docker-archive" | "oci-layout"
    config: dict[str, Any]
    layers: list[LayerRef]
    tags: list[str] = field(default_factory=list)


class _Source:
    """Members of a tarball, or files of a directory, by normalized name."""

    def __init__(self, path: str):
        self.path = path
        self.tar: tarfile.TarFile | None = None
        self.members: dict[str, tarfile.TarInfo] = {}
        if os.path.isdir(path):
            return
        try:
            self.tar = tarfile.open(path, "r:*")
            for member in self.tar:  # an image archive holds a few files per layer
                if len(self.members) >= MAX_ARCHIVE_ENTRIES:
                    raise bad(f"the archive has more than {MAX_ARCHIVE_ENTRIES} entries: not an image archive",
                              "invalid_image")
                self.members[member.name.removeprefix("./").lstrip("/")] = member
        except (tarfile.TarError, EOFError) as exc:
            raise bad(f"not a readable image archive: {exc}") from exc

    def close(self) -> None:
        if self.tar is not None:
            self.tar.close()

    def has(self, name: str) -> bool:
        name = name.removeprefix("./")
        if self.tar is None:
            target = Path(self.path, name).resolve()
            return target.is_relative_to(Path(self.path).resolve()) and target.is_file()
        member = self.members.get(name)
        return member is not None and (member.isfile() or member.issym() or member.islnk())

    def open(self, name: str) -> IO[bytes]:
        name = name.removeprefix("./")
        if self.tar is None:
            target = Path(self.path, name).resolve()
            if not target.is_relative_to(Path(self.path).resolve()):
                raise bad(f"{name!r} is outside the image layout")
            return open(target, "rb")
        member = self.members.get(name)
        stream = self.tar.extractfile(member) if member is not None else None
        if stream is None:
            raise bad(f"{name!r} is not in the archive", "missing_blob")
        return stream

    def json(self, name: str, *loc: str | int) -> Any:
        if not self.has(name):
            raise bad(f"{name!r} is missing from the archive", "missing_blob", *loc)
        with self.open(name) as fh:
            data = fh.read(MAX_JSON + 1)
        if len(data) > MAX_JSON:
            raise bad(f"{name!r} is larger than {MAX_JSON} bytes", "invalid_image", *loc)
        try:
            return json.loads(data)
        except ValueError as exc:
            raise bad(f"{name!r} is not JSON: {exc}", "invalid_image", *loc) from exc


def _blob_name(digest: Any, *loc: str | int) -> str:
    if not isinstance(digest, str) or not digest.startswith("sha256:") or len(digest) != 71:
        raise bad(f"unsupported digest {digest!r} (sha256 only)", "invalid_image", *loc)
    return "blobs/sha256/" + digest.removeprefix("sha256:")


def _pick(manifests: list[dict], tag: str | None, *loc: str | int) -> dict:
    if not manifests:
        raise bad("the image index lists no manifest", "invalid_image", *loc)
    if tag:
        for m in manifests:
            if (m.get("annotations") or {}).get("org.opencontainers.image.ref.name") == tag:
                return m
        raise bad(f"no manifest tagged {tag!r} in the image", "unknown_tag", *loc)
    for m in manifests:
        platform = m.get("platform") or {}
        if platform.get("os", "linux") == "linux" and platform.get("architecture", "amd64") == "amd64":
            return m
    return manifests[0]


class OpenArchive:
    """An image archive being read (``read`` parses; ``open_layer`` streams a layer)."""

    def __init__(self, path: str):
        self.source = _Source(path)

    def close(self) -> None:
        self.source.close()

    def __enter__(self) -> "OpenArchive":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read(self, tag: str | None = None) -> ImageArchive:
        src = self.source
        if src.has("index.json") and src.has("oci-layout"):
            return self._oci(tag)
        if src.has("manifest.json"):
            return self._docker()
        raise bad("neither an OCI image layout (oci-layout, index.json) nor a docker save archive (manifest.json)")

    def _oci(self, tag: str | None) -> ImageArchive:
        src = self.source
        index = src.json("index.json", "index.json")
        desc = _pick(index.get("manifests") or [], tag, "index.json", "manifests")
        depth = 0
        while desc.get("mediaType") in (OCI_INDEX, DOCKER_LIST):
            depth += 1
            if depth > 4:
                raise bad("image indexes nest too deep", "invalid_image", "index.json")
            nested = src.json(_blob_name(desc.get("digest"), "index.json"), "index.json")
            desc = _pick(nested.get("manifests") or [], None, "index.json", "manifests")
        manifest_name = _blob_name(desc.get("digest"), "index.json", "manifests")
        manifest = src.json(manifest_name, "manifest")
        config_desc = manifest.get("config") or {}
        config = src.json(_blob_name(config_desc.get("digest"), "manifest", "config"), "manifest", "config")
        layers = []
        for i, layer in enumerate(manifest.get("layers") or []):
            media = layer.get("mediaType", "")
            if media not in LAYER_TYPES:
                raise bad(f"layer {i}: unsupported media type {media!r}", "unsupported_layer", "manifest", "layers", i)
            name = _blob_name(layer.get("digest"), "manifest", "layers", i)
            if not src.has(name):
                raise bad(f"layer {i}: blob {layer.get('digest')} is missing from the archive", "missing_blob",
                          "manifest", "layers", i)
            layers.append(LayerRef(source=name, digest=layer["digest"], compression=LAYER_TYPES[media],
                                   size=layer.get("size")))
        if not layers:
            raise bad("the image has no layers", "invalid_image", "manifest", "layers")
        tags = [t for t in [(desc.get("annotations") or {}).get("org.opencontainers.image.ref.name")] if t]
        return ImageArchive(format="oci-layout", config=config, layers=layers, tags=tags)

    def _docker(self) -> ImageArchive:
        src = self.source
        manifest = src.json("manifest.json", "manifest.json")
        if not isinstance(manifest, list) or not manifest or not isinstance(manifest[0], dict):
            raise bad("manifest.json lists no image", "invalid_image", "manifest.json")
        entry = manifest[0]
        config = src.json(str(entry.get("Config", "")), "manifest.json", 0, "Config")
        layers = []
        for i, name in enumerate(entry.get("Layers") or []):
            if not isinstance(name, str) or not src.has(name):
                raise bad(f"layer {i}: {name!r} is missing from the archive", "missing_blob",
                          "manifest.json", 0, "Layers", i)
            # Named by their uncompressed digest (config rootfs.diff_ids), not checked here.
            layers.append(LayerRef(source=name, digest=None, compression=None))
        if not layers:
            raise bad("the image has no layers", "invalid_image", "manifest.json", 0, "Layers")
        return ImageArchive(format="docker-archive", config=config, layers=layers, tags=entry.get("RepoTags") or [])

    def open_layer(self, layer: LayerRef) -> "HashingReader":
        return HashingReader(self.source.open(layer.source))


class HashingReader:
    """A blob's bytes with their sha256 taken on the way."""

    def __init__(self, raw: IO[bytes]):
        self.raw = raw
        self.sha = hashlib.sha256()
        self.size = 0

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.sha.update(data)
        self.size += len(data)
        return data

    def digest(self) -> str:
        return "sha256:" + self.sha.hexdigest()

    def close(self) -> None:
        self.raw.close()
