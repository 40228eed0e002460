"""OCI / Docker image import (POST /v1/imports) with images made by real tools (umoci,
skopeo, docker-registry), flattened exactly: whiteouts, opaque directories, hard links,
gzip and zstd, owners and modes; the image config kept with the environment; bad images
refused with a 4xx and nothing registered."""

import ctypes
import gzip
import os
import tarfile
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from tests import ports
from tests.integration.image_service import oci_images as oci
from tests.integration.image_service.helpers import image_settings

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="unpacking images with their owners and mounting EROFS needs root"),
    pytest.mark.skipif(bool(oci.missing_tools()), reason=oci.missing_tools() or "tools present"),
]

REGISTRY_PORT = ports.private(90)
_libc = ctypes.CDLL(None, use_errno=True)


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> Path:
    return oci.build_app_image(tmp_path_factory.mktemp("oci"))


@contextmanager
def mounted_layers(data_dir: Path, digests: list[str], where: Path):
    """The layers (base first) as the sandbox sees them: EROFS mounts, overlaid when several."""
    with ExitStack() as stack:
        dirs = []
        for i, digest in enumerate(digests):
            target = where / f"l{i}"
            target.mkdir(parents=True)
            blob = data_dir / "blobs/sha256" / digest.removeprefix("sha256:")
            assert _libc.mount(os.fsencode(blob), os.fsencode(target), b"erofs", 1, None) == 0, os.strerror(
                ctypes.get_errno())
            stack.callback(_libc.umount2, os.fsencode(target), 0)
            dirs.append(target)
        if len(dirs) == 1:
            yield dirs[0]
            return
        merged = where / "merged"
        merged.mkdir()
        opts = "lowerdir=" + ":".join(str(d) for d in reversed(dirs))
        assert _libc.mount(b"overlay", os.fsencode(merged), b"overlay", 1, opts.encode()) == 0, os.strerror(
            ctypes.get_errno())
        stack.callback(_libc.umount2, os.fsencode(merged), 0)
        yield merged


def do_import(client, body: bytes | None = None, **params):
    params = {"name": "app", "version": "1", "wait": "true", **params}
    return client.post("/v1/imports", params=params, content=body,
                       headers={"Content-Type": "application/x-tar"} if body is not None else {})


def assert_app_tree(root: Path) -> None:
    app = root / "opt/app"
    assert sorted(os.listdir(app)) == ["bin", "hl", "keep.txt", "replaced.txt"]  # gone.txt, dir/ deleted
    assert (app / "replaced.txt").read_text() == "new\n"
    assert (app / "hl").stat().st_ino == (app / "keep.txt").stat().st_ino  # one file, two names
    assert sorted(os.listdir(root / "opt/opq")) == ["c"]
    assert (app / "bin/hello").stat().st_mode & 0o777 == 0o755
    home = (root / "home/app").stat()
    assert (home.st_uid, home.st_gid) == (1001, 1002)
    assert (root / "tmp").stat().st_mode & 0o7777 == 0o1777
    assert os.readlink(root / "bin/sh") == "/bin/busybox"
    assert not any(name.startswith(".wh.") for _, dirs, files in os.walk(root) for name in dirs + files)


CONFIG = {"env": {"PATH": "/opt/app/bin:/usr/bin:/bin", "GREETING": "from-image"}, "cwd": "/opt/app",
          "user": "1001:1002", "entrypoint": ["/bin/sh"], "cmd": ["-c", "hello"], "exposed_ports": ["8080/tcp"],
          "labels": {"org.corral.test": "yes"}}


@pytest.mark.parametrize("fmt", ["oci-tar", "docker-archive", "oci-zstd"])
def test_import_flattens_exactly(fmt, client, data_dir, image, tmp_path):
    if fmt == "oci-tar":
        body = oci.tar_dir(image, tmp_path / "image.tar").read_bytes()
    elif fmt == "docker-archive":
        body = oci.docker_archive(image, tmp_path / "docker.tar").read_bytes()
    else:
        layout = oci.zstd_layout(image, tmp_path / "Z")
        assert all(p.read_bytes()[:4] == b"\x28\xb5\x2f\xfd" for p in oci.layer_blob_names(layout))
        body = oci.tar_dir(layout, tmp_path / "zstd.tar").read_bytes()
    r = do_import(client, body, environment=f"app-{fmt}")
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["state"] == "succeeded" and job["progress"]["layers_done"] == job["progress"]["layers_total"] == 2
    assert job["result"]["format"] == ("docker-archive" if fmt == "docker-archive" else "oci-layout")
    env = client.get(f"/v1/environments/app-{fmt}").json()
    assert env["config"] == CONFIG and [x["kind"] for x in env["layers"]] == ["base"]
    assert client.get(f"/v1/imports/{job['id']}").json()["state"] == "succeeded"
    with mounted_layers(data_dir, [env["layers"][0]["digest"]], tmp_path / "mnt") as root:
        assert_app_tree(root)
    # The same image in any of these forms is the same tree, hence the same layer.
    digests = {client.get(f"/v1/environments/{e['name']}").json()["layers"][0]["digest"]
               for e in client.get("/v1/environments").json()}
    assert len(digests) == 1


def test_opaque_dir_and_split_into_base_and_workspace(client, data_dir, image, tmp_path):
    layout = oci.copy_layout(image, tmp_path / "L")
    # A third layer (hand-made: umoci writes per-file whiteouts only) that makes opt/opq opaque
    # and adds d, deletes keep.txt (its hard link hl stays) and replaces a file by a directory.
    oci.append_layer(layout, [
        oci.member("opt/opq/", type=tarfile.DIRTYPE, mode=0o755),
        oci.member("opt/opq/.wh..wh..opq", b""),
        oci.member("opt/opq/d", b"d\n"),
        oci.member("opt/app/.wh.keep.txt", b""),
        oci.member("opt/app/replaced.txt", type=tarfile.DIRTYPE, mode=0o750),
        oci.member("opt/app/replaced.txt/inside", b"in\n"),
    ])
    body = oci.tar_dir(layout, tmp_path / "image.tar").read_bytes()
    flat = do_import(client, body, name="opq", environment="opq-flat")
    assert flat.status_code == 201, flat.text
    split = do_import(client, body, name="opqs", environment="opq-split", split_at=2)
    assert split.status_code == 201, split.text
    assert split.json()["result"]["layers"] == ["opqs:1", "opqs.ws:1"]
    envs = [client.get(f"/v1/environments/{n}").json() for n in ("opq-flat", "opq-split")]
    assert [x["kind"] for x in envs[1]["layers"]] == ["base", "workspace"]
    trees = []
    for i, env in enumerate(envs):
        with mounted_layers(data_dir, [x["digest"] for x in env["layers"]], tmp_path / f"m{i}") as root:
            assert sorted(os.listdir(root / "opt/opq")) == ["d"]
            assert sorted(os.listdir(root / "opt/app")) == ["bin", "hl", "replaced.txt"]
            assert (root / "opt/app/hl").read_text() == "keep\n"
            assert (root / "opt/app/replaced.txt/inside").read_text() == "in\n"
            trees.append(sorted((str(p.relative_to(root)), p.lstat().st_mode, p.lstat().st_uid)
                                for p in root.rglob("*")))
    assert trees[0] == trees[1]  # the split, overlaid, is the flattened image


def test_pull_from_a_registry_on_loopback(image, tmp_path, data_dir):
    from fastapi.testclient import TestClient

    from corral_image_service.app import create_app

    with oci.registry(tmp_path / "reg", REGISTRY_PORT) as addr:
        oci.push(image, addr, "corral/app:1")
        settings = image_settings(data_dir, registry=addr, registry_tls_verify=False)
        with TestClient(create_app(settings)) as client:
            r = do_import(client, reference="corral/app:1", owner="acme", environment="pulled")
            assert r.status_code == 201, r.text
            env = client.get("/v1/environments/pulled", params={"owner": "acme"}).json()
            assert env["config"] == CONFIG
            with mounted_layers(data_dir, [env["layers"][0]["digest"]], tmp_path / "mnt") as root:
                assert_app_tree(root)
            assert client.get("/v1/environments/pulled").status_code == 404  # acme's, not shared
            unknown = do_import(client, reference="corral/nope:1", owner="acme", environment="nope")
            assert unknown.status_code == 422 and unknown.json()["error"]["code"] == "image_not_found"
            host = do_import(client, reference="evil.example:5000/x:1", owner="acme")
            assert host.status_code == 422  # a host in the reference: never fetched


def test_reference_without_registry_is_422(client):
    r = do_import(client, reference="corral/app:1")
    assert r.status_code == 422 and r.json()["error"]["code"] == "registry_not_configured"


def _truncate_last_layer(layout: Path) -> None:
    blob = oci.layer_blob_names(layout)[-1]
    data = blob.read_bytes()
    blob.write_bytes(data[: len(data) // 2])


def _ten_gb_member() -> tuple:
    info = tarfile.TarInfo("huge")
    info.size = 10 * 1024**3
    return info, None


BAD = {
    "missing_blob": (lambda layout: oci.layer_blob_names(layout)[0].unlink(), 422, "missing_blob"),
    "dotdot_entry": (lambda layout: oci.append_layer(layout, [oci.member("../../escape", b"x")]), 422, "unsafe_image"),
    "device_node": (lambda layout: oci.append_layer(layout, [oci.member("opt/disk", type=tarfile.BLKTYPE)]), 422,
                    "unsafe_image"),
    "write_through_symlink": (lambda layout: oci.append_layer(layout, [
        oci.member("opt/link", type=tarfile.SYMTYPE, linkname="/"),
        oci.member("opt/link/escape-by-symlink", b"x")]), None, None),
    "digest_mismatch": (lambda layout: oci.append_layer(layout, [oci.member("x", b"x")],
                                                        digest="sha256:" + "0" * 64), 422, "missing_blob"),
    "truncated_layer": (_truncate_last_layer, 422, "invalid_image"),
    "claims_10gb": (lambda layout: oci.append_layer(layout, [_ten_gb_member()], compress=False), 413,
                    "image_too_large"),
    "not_an_image": (lambda layout: (layout / "index.json").unlink(), 422, "invalid_image"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_images_are_refused_and_register_nothing(case, client, data_dir, image, tmp_path):
    layout = oci.copy_layout(image, tmp_path / "L")
    spoil, status, code = BAD[case]
    spoil(layout)
    blobs_before = set(os.listdir(data_dir / "blobs/sha256")) if (data_dir / "blobs/sha256").exists() else set()
    r = do_import(client, oci.tar_dir(layout, tmp_path / "bad.tar").read_bytes(), environment="bad")
    assert not Path("/escape").exists() and not Path("/escape-by-symlink").exists()
    if status is None:
        # A symlink to "/" resolves inside the image: the file lands in the image's own root.
        assert r.status_code == 201, r.text
        env = client.get("/v1/environments/bad").json()
        with mounted_layers(data_dir, [env["layers"][0]["digest"]], tmp_path / "mnt") as root:
            assert (root / "escape-by-symlink").read_bytes() == b"x"
        return
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code and r.json()["error"]["details"][0]["loc"][0] in ("body", "query")
    assert client.get("/v1/environments/bad").status_code == 404
    assert client.get("/v1/layers").json() == []
    assert set(os.listdir(data_dir / "blobs/sha256")) == blobs_before
    assert [p for p in os.listdir(data_dir / "tmp")] == []


def test_gzip_layer_with_wrong_media_type_is_refused(client, image, tmp_path):
    layout = oci.copy_layout(image, tmp_path / "L")
    oci.append_layer(layout, [oci.member("x", b"x")], compress=True)
    # Claim the gzip blob is a plain tar.
    import json
    index = json.loads((layout / "index.json").read_text())
    manifest_path = layout / "blobs/sha256" / index["manifests"][0]["digest"].removeprefix("sha256:")
    manifest = json.loads(manifest_path.read_text())
    manifest["layers"][-1]["mediaType"] = "application/vnd.oci.image.layer.v1.tar"
    manifest_path.write_text(json.dumps(manifest))  # its digest no longer matches: not checked for manifests
    r = do_import(client, oci.tar_dir(layout, tmp_path / "bad.tar").read_bytes())
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_image", r.text
    assert gzip  # (imported for the reader: the layer really is gzip)


def test_an_import_cut_short_by_a_restart_says_so(data_dir):
    """A job still running when image-service stopped is failed at the next start (its work
    dir is gone): 'interrupted', with a 503 status, never left 'running' forever."""
    from fastapi.testclient import TestClient

    from corral_image_service.app import create_app
    from corral_image_service.db.engine import session_scope
    from corral_image_service.imports.models import ImportJob
    from corral_image_service.imports.schemas import ImportProgress

    settings = image_settings(data_dir)
    with TestClient(create_app(settings)) as client:
        engine = client.app.state.services.engine
        with session_scope(engine) as session:
            session.add(ImportJob(id="imp-cut", owner="acme", name="x", version="1", state="running",
                                  progress=ImportProgress(step="unpacking").model_dump_json()))
            session.commit()
    with TestClient(create_app(settings)) as client:
        job = client.get("/v1/imports/imp-cut", params={"owner": "acme"}).json()
        assert job["state"] == "failed" and job["error"]["code"] == "interrupted" and job["error"]["status"] == 503
        assert client.get("/v1/imports/imp-cut", params={"owner": "other"}).status_code == 404


def test_an_image_of_too_many_entries_is_refused(client, data_dir, image, tmp_path, monkeypatch):
    """A layer of a great many empty files (a few MB compressed, nothing for the byte budget)
    would keep every tar header in the image-service's memory: entries are capped per image."""
    from corral_image_service.layers import tarsafe

    layout = oci.copy_layout(image, tmp_path / "L")
    oci.append_layer(layout, [oci.member(f"opt/empty/{i}", b"") for i in range(400)])
    monkeypatch.setattr(tarsafe, "MAX_TAR_ENTRIES", 300)
    r = do_import(client, oci.tar_dir(layout, tmp_path / "many.tar").read_bytes(), environment="many")
    assert r.status_code == 413 and r.json()["error"]["code"] == "image_too_large", r.text
    assert "more than 300 entries" in r.json()["error"]["message"]
    assert client.get("/v1/environments/many").status_code == 404
    assert [p for p in os.listdir(data_dir / "tmp")] == []
