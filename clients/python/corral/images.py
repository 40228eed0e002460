"""``corral.layers``, ``corral.environments`` and ``corral.images``: bring your own environment.

    layer = corral.layers.upload("rootfs/", kind="base", name="mybase", version="1")
    corral.environments.create("myenv", base="mybase:1")
    job = corral.images.import_image("app.tar", name="app", version="1")   # docker save / OCI layout
    with corral.sandboxes.create(job.result.environment) as sb: ...

Each is written once for both flavours (``Layers``/``AsyncLayers``...). Uploads are sent from
memory (a directory is tarred first, owners and modes as they are).
"""

import io
import os
import tarfile
from typing import Any

from corral import _calls as calls
from corral._transport import Flavored, Op, Sleep, operation
from corral.errors import CorralError
from corral_client.models import Environment, ImageImport, Layer, StorageUsage


def tar_bytes(path: str | os.PathLike[str]) -> bytes:
    """A tar file's bytes as they are, or a directory tarred (its contents at the root)."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        with open(path, "rb") as fh:
            return fh.read()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for entry in sorted(os.listdir(path)):
            tf.add(os.path.join(path, entry), arcname=entry)
    return buf.getvalue()


class _LayersOps(Flavored):
    @operation
    def upload(self, dir_or_tar: str | os.PathLike[str], *, kind: str = "base", name: str,
               version: str) -> calls.Call[Layer]:
        """Upload a root filesystem (a directory, or a tar / gzip tar) as layer ``name:version``
        of ``kind`` (base, workspace, toolkit; ``diff``: an OCI layer tar with whiteouts)."""
        return calls.upload_layer(kind, name, version, tar_bytes(dir_or_tar))

    @operation
    def list(self, kind: str | None = None) -> calls.Call[list[Layer]]:
        """Your layers and the shared catalogue's."""
        return calls.list_layers(kind)

    @operation
    def get(self, name: str, version: str) -> calls.Call[Layer]:
        return calls.get_layer(name, version)

    @operation
    def delete(self, name: str, version: str) -> calls.Call[Layer]:
        return calls.delete_layer(name, version)


class _EnvironmentsOps(Flavored):
    @operation
    def create(self, name: str, *, base: str, workspace: str | None = None, toolkit: str | None = None,
               diffs: list[str] | None = None, config: dict[str, Any] | None = None) -> calls.Call[Environment]:
        """An environment of layers ("name:version"), with ``config`` (env, cwd, user,
        entrypoint, cmd, exposed_ports, labels) as its sandboxes' defaults."""
        body = {"name": name, "base": base, "workspace": workspace, "toolkit": toolkit, "diffs": diffs or [],
                "config": config}
        return calls.create_environment({k: v for k, v in body.items() if v is not None})

    @operation
    def list(self) -> calls.Call[list[Environment]]:
        return calls.list_environments()

    @operation
    def get(self, name: str) -> calls.Call[Environment]:
        return calls.get_environment(name)

    @operation
    def delete(self, name: str) -> calls.Call[Environment]:
        return calls.delete_environment(name)


class _ImagesOps(Flavored):
    @operation
    def import_image(self, path_or_ref: str | os.PathLike[str], *, name: str, version: str,
                     environment: str | None = None, split_at: int | None = None, tag: str | None = None,
                     wait: bool = True, timeout: float = 600.0, poll_s: float = 0.5) -> Op[ImageImport]:
        """Import a ``docker save`` tarball or an OCI image layout (a tarball or a directory), or,
        when ``path_or_ref`` is no file, a reference in the operator's registry. The result is
        layer(s) ``name:version`` and environment ``environment`` (default ``name``) carrying the
        image's config. With ``wait`` return when done, raising ``CorralError`` if it failed."""
        local = os.path.exists(os.fspath(path_or_ref))
        params = {"name": name, "version": version, "environment": environment, "split_at": split_at, "tag": tag,
                  "reference": None if local else os.fspath(path_or_ref)}
        job = yield calls.import_image(params, tar_bytes(path_or_ref) if local else None)
        waited = 0.0
        while wait and str(job.state) in ("queued", "running"):
            if waited > timeout:
                raise CorralError(504, "import_timeout", f"import {job.id} still {job.state} after {timeout}s")
            yield Sleep(poll_s)
            waited += poll_s
            job = yield calls.get_image_import(job.id)
        if wait and str(job.state) == "failed":
            error = job.error
            raise CorralError(int(error.status), str(error.code), str(error.message),
                              [{"loc": error.loc, "msg": error.message}] if error.loc else [])
        return job

    @operation
    def get_import(self, import_id: str) -> calls.Call[ImageImport]:
        return calls.get_image_import(import_id)

    @operation
    def usage(self) -> calls.Call[StorageUsage]:
        """Bytes of layer images you hold, against your quota."""
        return calls.get_image_usage()


class Layers(_LayersOps, flavor="sync"):
    pass


class AsyncLayers(_LayersOps, flavor="async"):
    pass


class Environments(_EnvironmentsOps, flavor="sync"):
    pass


class AsyncEnvironments(_EnvironmentsOps, flavor="async"):
    pass


class Images(_ImagesOps, flavor="sync"):
    pass


class AsyncImages(_ImagesOps, flavor="async"):
    pass
