"""Test images built with real tools: umoci (OCI layouts, layers with whiteouts and hard
links), skopeo (docker-archive, zstd recompression, registry pushes), docker-registry (a
Distribution v2 registry on loopback). And small hand-made layers for what those tools never
write (opaque directories, unsafe entries), appended to a real layout."""

import gzip
import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import tarfile
from contextlib import contextmanager
from pathlib import Path

from tests.polling import until_sync

TOOLS = ("umoci", "skopeo")


def missing_tools() -> str:
    missing = [t for t in TOOLS if shutil.which(t) is None]
    return f"needs {', '.join(missing)} (apt-get install umoci skopeo)" if missing else ""


def run(*cmd: str | Path) -> None:
    subprocess.run([str(c) for c in cmd], check=True, capture_output=True)


def build_app_image(work: Path) -> Path:
    """An OCI layout ``work/L`` tagged ``app``: a busybox layer with /opt/app files, then a
    layer that deletes (gone.txt, dir/, opq/a), replaces (replaced.txt) and hard-links
    (keep.txt <-> hl) files; config Env/WorkingDir/User/Entrypoint/Cmd/ports/labels."""
    layout, bundle = work / "L", work / "B"
    run("umoci", "init", "--layout", layout)
    run("umoci", "new", "--image", f"{layout}:app")
    run("umoci", "unpack", "--image", f"{layout}:app", bundle)
    root = bundle / "rootfs"
    for d in ("bin", "etc", "opt/app/dir", "opt/opq", "tmp", "home/app"):
        (root / d).mkdir(parents=True, exist_ok=True)
    shutil.copy("/bin/busybox", root / "bin/busybox")
    run("chroot", root, "/bin/busybox", "--install", "-s", "/bin")
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\napp:x:1001:1002:app:/home/app:/bin/sh\n")
    (root / "etc/group").write_text("root:x:0:\napp:x:1002:\n")
    os.chown(root / "home/app", 1001, 1002)
    for name, text in {"keep.txt": "keep\n", "gone.txt": "gone\n", "replaced.txt": "old\n", "dir/x": "x\n"}.items():
        (root / "opt/app" / name).write_text(text)
    (root / "opt/opq/a").write_text("a\n")
    os.chmod(root / "tmp", 0o1777)
    run("umoci", "repack", "--refresh-bundle", "--image", f"{layout}:app", bundle)
    # The upper layer: deletes, replaces, hard-links, adds a tool on PATH.
    (root / "opt/app/gone.txt").unlink()
    (root / "opt/app/replaced.txt").write_text("new\n")
    shutil.rmtree(root / "opt/app/dir")
    (root / "opt/opq/a").unlink()
    (root / "opt/opq/c").write_text("c\n")
    os.link(root / "opt/app/keep.txt", root / "opt/app/hl")
    (root / "opt/app/bin").mkdir()
    (root / "opt/app/bin/hello").write_text("#!/bin/sh\necho hello from the image\n")
    os.chmod(root / "opt/app/bin/hello", 0o755)
    run("umoci", "repack", "--refresh-bundle", "--image", f"{layout}:app", bundle)
    run("umoci", "config", "--image", f"{layout}:app", "--config.env", "PATH=/opt/app/bin:/usr/bin:/bin",
        "--config.env", "GREETING=from-image", "--config.workingdir", "/opt/app", "--config.user", "app",
        "--config.entrypoint", "/bin/sh", "--config.cmd", "-c", "--config.cmd", "hello",
        "--config.exposedports", "8080/tcp", "--config.label", "org.corral.test=yes")
    run("umoci", "gc", "--layout", layout)
    return layout


def tar_dir(src: Path, out: Path) -> Path:
    with tarfile.open(out, "w") as tf:
        for entry in sorted(src.rglob("*")):
            tf.add(entry, arcname=str(entry.relative_to(src)), recursive=False)
    return out


def docker_archive(layout: Path, out: Path) -> Path:
    run("skopeo", "--insecure-policy", "copy", f"oci:{layout}:app", f"docker-archive:{out}:corral/app:1")
    return out


def zstd_layout(layout: Path, out: Path) -> Path:
    run("skopeo", "--insecure-policy", "copy", "--dest-compress-format", "zstd", f"oci:{layout}:app", f"oci:{out}:app")
    return out


def copy_layout(layout: Path, out: Path) -> Path:
    shutil.copytree(layout, out, symlinks=True)
    return out


def _manifest_path(layout: Path) -> tuple[dict, Path]:
    index = json.loads((layout / "index.json").read_text())
    digest = index["manifests"][0]["digest"].removeprefix("sha256:")
    return index, layout / "blobs/sha256" / digest


def _put_blob(layout: Path, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs/sha256" / digest).write_bytes(data)
    return f"sha256:{digest}"


def append_layer(layout: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], *,
                 compress: bool = True, digest: str | None = None) -> str:
    """Add a hand-made layer on top of ``layout``'s image (manifest, config diff_ids, index
    rewritten); returns the layer's digest. ``digest`` overrides the manifest's (a lie)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for info, data in members:
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    raw = buf.getvalue()
    blob = gzip.compress(raw, mtime=0) if compress else raw
    layer_digest = _put_blob(layout, blob)
    index, manifest_path = _manifest_path(layout)
    manifest = json.loads(manifest_path.read_text())
    config_path = layout / "blobs/sha256" / manifest["config"]["digest"].removeprefix("sha256:")
    config = json.loads(config_path.read_text())
    config["rootfs"]["diff_ids"].append("sha256:" + hashlib.sha256(raw).hexdigest())
    config_bytes = json.dumps(config).encode()
    manifest["config"] = {**manifest["config"], "digest": _put_blob(layout, config_bytes), "size": len(config_bytes)}
    manifest["layers"].append({"mediaType": "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if compress else ""),
                               "digest": digest or layer_digest, "size": len(blob)})
    manifest_bytes = json.dumps(manifest).encode()
    index["manifests"][0] = {**index["manifests"][0], "digest": _put_blob(layout, manifest_bytes),
                             "size": len(manifest_bytes)}
    (layout / "index.json").write_text(json.dumps(index))
    return layer_digest


def member(name: str, data: bytes | None = None, **kw) -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.mode = kw.pop("mode", 0o644)
    for key, value in kw.items():
        setattr(info, key, value)
    if data is not None:
        info.size = len(data)
    return info, data


def layer_blob_names(layout: Path) -> list[Path]:
    _, manifest_path = _manifest_path(layout)
    manifest = json.loads(manifest_path.read_text())
    return [layout / "blobs/sha256" / layer["digest"].removeprefix("sha256:") for layer in manifest["layers"]]


@contextmanager
def registry(work: Path, port: int):
    """docker-registry (Distribution v2, Debian's) on 127.0.0.1:port with filesystem storage."""
    work.mkdir(parents=True, exist_ok=True)
    config = work / "registry.yml"
    config.write_text(f"version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {work}/store\n"
                      f"http:\n  addr: 127.0.0.1:{port}\n")
    proc = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)

    def answers() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    try:
        until_sync(answers, timeout_s=20, what="docker-registry to listen")
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def push(layout: Path, registry_addr: str, reference: str) -> None:
    run("skopeo", "--insecure-policy", "copy", "--dest-tls-verify=false", f"oci:{layout}:app",
        f"docker://{registry_addr}/{reference}")
