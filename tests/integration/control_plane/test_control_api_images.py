"""Public images through the api (corral_api/images) against a real image-service: per-tenant
catalogues over one shared blob store, quotas, deletes, and bad tars refused with nothing left."""

import io
import os
import tarfile
from contextlib import AsyncExitStack
from pathlib import Path

import httpx
import pytest

from corral_api.app import create_app as api_app
from corral_api.settings import ApiSettings
from corral_image_service.app import create_app as image_app
from tests.inprocess import serve
from tests.integration.image_service.helpers import image_settings, make_tree, tar_of

TOKEN = "images-test-internal-token"
KEYS = {"alpha": "alpha-key-0123456789", "beta": "beta-key-0123456789"}
TAR = {"Content-Type": "application/x-tar"}


def bearer(tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[tenant]}"}


class Plane:
    def __init__(self, api: httpx.AsyncClient, images: httpx.AsyncClient, data_dir: Path):
        self.api, self.images, self.data_dir = api, images, data_dir

    def blobs(self) -> set[str]:
        return {p.name for p in (self.data_dir / "blobs" / "sha256").iterdir()}

    def tmp_litter(self) -> list[str]:
        return [p.name for p in (self.data_dir / "tmp").iterdir()]

    async def upload(self, tenant: str, body: bytes, *, name="base", version="1", kind="base") -> httpx.Response:
        return await self.api.post("/v1/layers", params={"kind": kind, "name": name, "version": version},
                                   content=body, headers={**TAR, **bearer(tenant)})


@pytest.fixture
async def plane(redis_url, amqp_url, tmp_path):
    common = {"redis_url": redis_url, "amqp_url": amqp_url, "internal_token": TOKEN, "log_json": False,
              "log_level": "WARNING"}
    data_dir = tmp_path / "images"
    async with AsyncExitStack() as stack:
        images_url = await stack.enter_async_context(serve(image_app(image_settings(
            data_dir, internal_token=TOKEN, redis_url=redis_url, amqp_url=amqp_url, max_unpacked_mb=64))))
        api_url = await stack.enter_async_context(serve(api_app(ApiSettings(
            database_url=f"sqlite:///{tmp_path}/api.db", image_service_url=images_url, image_quota_mb=3,
            keys=",".join(f"{t}:{k}" for t, k in KEYS.items()), **common))))
        api = await stack.enter_async_context(httpx.AsyncClient(base_url=api_url, timeout=120))
        images = await stack.enter_async_context(httpx.AsyncClient(
            base_url=images_url, headers={"X-Corral-Internal-Token": TOKEN}, timeout=120))
        yield Plane(api, images, data_dir)


def tar_with(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for info, data in members:
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def member(name: str, data: bytes = b"", **kw) -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.size = len(data) if kw.get("type", tarfile.REGTYPE) == tarfile.REGTYPE else 0
    for key, value in kw.items():
        setattr(info, key, value)
    return info, (data if info.type == tarfile.REGTYPE else None)


async def test_tenants_share_blobs_not_names(plane, tmp_path):
    body = tar_of(make_tree(tmp_path / "t", {"bin/tool": "#!/bin/sh\necho tool\n"}))
    before = plane.blobs()
    a = await plane.upload("alpha", body, name="tools", version="1")
    assert a.status_code == 201, a.text
    assert a.json()["shared"] is False and a.json()["ref"] == "tools:1"
    # The other tenant sees nothing of it: 404, not in its list.
    assert (await plane.api.get("/v1/layers/tools/1", headers=bearer("beta"))).status_code == 404
    assert all(x["name"] != "tools" for x in (await plane.api.get("/v1/layers", headers=bearer("beta"))).json())
    # Its own upload of the same bytes under the same name is its own layer, stored once.
    b = await plane.upload("beta", body, name="tools", version="1")
    assert b.status_code == 201 and b.json()["digest"] == a.json()["digest"]
    assert plane.blobs() - before == {a.json()["digest"].removeprefix("sha256:")}
    # A re-upload is 200; other content under a taken name:version is 409, and leaves no blob.
    assert (await plane.upload("alpha", body, name="tools", version="1")).status_code == 200
    other = tar_of(make_tree(tmp_path / "o", {"bin/tool": "#!/bin/sh\necho other\n"}))
    conflict = await plane.upload("alpha", other, name="tools", version="1")
    assert conflict.status_code == 409 and conflict.json()["error"]["code"] == "layer_exists"
    assert plane.blobs() - before == {a.json()["digest"].removeprefix("sha256:")}

    # The shared catalogue (the operator's, owner "") is readable by both, writable by neither.
    shared = await plane.images.post("/v1/layers", params={"kind": "base", "name": "os", "version": "1"},
                                     content=tar_of(make_tree(tmp_path / "s", {"etc/os": "shared\n"})), headers=TAR)
    assert shared.status_code == 201
    for tenant in KEYS:
        got = await plane.api.get("/v1/layers/os/1", headers=bearer(tenant))
        assert got.status_code == 200 and got.json()["shared"] is True
        assert (await plane.api.delete("/v1/layers/os/1", headers=bearer(tenant))).status_code == 404

    # An environment of one's own layers and the shared ones; 404 to the other tenant.
    ws = await plane.upload("alpha", body, name="ws", version="1", kind="workspace")
    assert ws.status_code == 201
    env = await plane.api.post("/v1/environments", headers=bearer("alpha"), json={
        "name": "mine", "base": "os:1", "workspace": "ws:1",
        "config": {"env": {"PATH": "/opt/bin:/bin"}, "cwd": "/srv", "user": "1234:1234"}})
    assert env.status_code == 201, env.text
    assert [layer["kind"] for layer in env.json()["layers"]] == ["base", "workspace"]
    assert env.json()["config"]["cwd"] == "/srv" and env.json()["shared"] is False
    assert (await plane.api.get("/v1/environments/mine", headers=bearer("beta"))).status_code == 404
    unknown = await plane.api.post("/v1/environments", headers=bearer("beta"),
                                   json={"name": "theirs", "base": "os:1", "workspace": "ws:1"})
    assert unknown.status_code == 422 and unknown.json()["error"]["code"] == "unknown_layer"
    assert unknown.json()["error"]["details"][0]["loc"] == ["body", "workspace"]

    # Deleting: a used layer is 409; after the environment goes, the layer goes; the blob
    # stays while beta's layer names the same bytes.
    in_use = await plane.api.delete("/v1/layers/ws/1", headers=bearer("alpha"))
    assert in_use.status_code == 409 and in_use.json()["error"]["code"] == "layer_in_use"
    assert (await plane.api.delete("/v1/environments/mine", headers=bearer("alpha"))).status_code == 200
    assert (await plane.api.delete("/v1/layers/ws/1", headers=bearer("alpha"))).status_code == 200
    assert (await plane.api.delete("/v1/layers/tools/1", headers=bearer("alpha"))).status_code == 200
    assert (await plane.api.get("/v1/images/usage", headers=bearer("alpha"))).json()["used_bytes"] == 0
    assert a.json()["digest"].removeprefix("sha256:") in plane.blobs()
    assert (await plane.api.delete("/v1/layers/tools/1", headers=bearer("beta"))).status_code == 200
    assert a.json()["digest"].removeprefix("sha256:") not in plane.blobs()

    assert (await plane.api.get("/v1/layers")).status_code == 401


async def test_storage_quota(plane, tmp_path):
    # Random bytes do not compress: 2 MiB per layer against a 3 MiB quota.
    for i in (1, 2):
        tree = make_tree(tmp_path / f"r{i}", {})
        (tree / "blob").write_bytes(os.urandom(2 * 1024 * 1024))
        body = tar_of(tree)
        if i == 1:
            first = await plane.upload("alpha", body, name="big", version="1")
            assert first.status_code == 201, first.text
            blobs = plane.blobs()
        else:
            refused = await plane.upload("alpha", body, name="big", version="2")
            assert refused.status_code == 413, refused.text
            assert refused.json()["error"]["code"] == "storage_quota_exceeded"
            assert refused.json()["error"]["quota_bytes"] == 3 * 1024 * 1024
            assert plane.blobs() == blobs  # the built blob is gone again
            # Another tenant has its own quota.
            assert (await plane.upload("beta", body, name="big", version="2")).status_code == 201
    usage = (await plane.api.get("/v1/images/usage", headers=bearer("alpha"))).json()
    assert usage["layers"] == 1 and 2 * 1024 * 1024 < usage["used_bytes"] <= 3 * 1024 * 1024
    names = [x["ref"] for x in (await plane.api.get("/v1/layers", headers=bearer("alpha"))).json()]
    assert names == ["big:1"]


def _truncated() -> bytes:
    body = tar_with(member("etc/big", b"x" * 100_000))
    return body[:20_000]


def _claims_10gb() -> bytes:
    info = tarfile.TarInfo("huge")
    info.size = 10 * 1024**3
    return info.tobuf(format=tarfile.GNU_FORMAT) + b"\0" * 4096


BAD_TARS = {
    "dotdot": (lambda: tar_with(member("../escape", b"x")), 422, "unsafe_tar"),
    "absolute": (lambda: tar_with(member("/etc/passwd", b"x")), 422, "unsafe_tar"),
    "write_through_absolute_symlink": (lambda: tar_with(member("etc", type=tarfile.SYMTYPE, linkname="/etc"),
                                                        member("etc/passwd", b"root::0:0::/:/bin/sh\n")),
                                       422, "unsafe_tar"),
    "hardlink_out": (lambda: tar_with(member("shadow", type=tarfile.LNKTYPE, linkname="/etc/shadow")), 422,
                     "unsafe_tar"),
    "device_node": (lambda: tar_with(member("disk", type=tarfile.BLKTYPE, devmajor=8, devminor=0)), 422,
                    "unsafe_tar"),
    "truncated": (_truncated, 422, "invalid_tar"),
    "claims_10gb": (_claims_10gb, 413, "layer_too_large"),
    "not_a_tar": (lambda: b"hello, this is not a tar archive" * 64, 422, "invalid_tar"),
}


@pytest.mark.parametrize("case", sorted(BAD_TARS))
async def test_bad_tars_are_refused_and_leave_nothing(plane, case):
    make, status, code = BAD_TARS[case]
    before = plane.blobs()
    r = await plane.upload("alpha", make(), name="bad", version="1")
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code and r.json()["error"]["details"][0]["loc"] == ["body"]
    assert (await plane.api.get("/v1/layers/bad/1", headers=bearer("alpha"))).status_code == 404
    assert plane.blobs() == before and plane.tmp_litter() == []
    # The host was not written through any link.
    assert not Path("/escape").exists()


async def test_a_tar_of_too_many_entries_is_refused(plane, monkeypatch):
    """Empty files cost the byte limit nothing but each keeps a header in memory: capped."""
    from corral_image_service.layers import tarsafe

    monkeypatch.setattr(tarsafe, "MAX_TAR_ENTRIES", 50)
    before = plane.blobs()
    r = await plane.upload("alpha", tar_with(*[member(f"empty/{i}", b"") for i in range(60)]), name="many", version="1")
    assert r.status_code == 413 and r.json()["error"]["code"] == "layer_too_large", r.text
    assert "more than 50 entries" in r.json()["error"]["message"]
    assert plane.blobs() == before and plane.tmp_litter() == []


async def test_import_through_the_api(plane, tmp_path):
    from tests.integration.image_service import oci_images as oci

    if oci.missing_tools() or os.geteuid() != 0:
        pytest.skip(oci.missing_tools() or "needs root")
    layout = oci.build_app_image(tmp_path / "oci")
    body = oci.docker_archive(layout, tmp_path / "app.tar").read_bytes()
    started = await plane.api.post("/v1/images/import", params={"name": "app", "version": "1"}, content=body,
                                   headers={**TAR, **bearer("alpha")})
    assert started.status_code == 202, started.text
    job_id = started.json()["id"]

    async def finished():
        job = (await plane.api.get(f"/v1/images/imports/{job_id}", headers=bearer("alpha"))).json()
        return job if job["state"] in ("succeeded", "failed") else None

    from tests.polling import until

    job = await until(finished, timeout_s=120, what="the import to finish")
    assert job["state"] == "succeeded", job
    assert job["result"]["config"]["user"] == "1001:1002" and job["result"]["layers"] == ["app:1"]
    assert (await plane.api.get(f"/v1/images/imports/{job_id}", headers=bearer("beta"))).status_code == 404
    env = (await plane.api.get("/v1/environments/app", headers=bearer("alpha"))).json()
    assert env["config"]["cwd"] == "/opt/app" and env["shared"] is False
    assert (await plane.api.get("/v1/environments/app", headers=bearer("beta"))).status_code == 404
    # No registry configured here: a reference is a clear 422.
    ref = await plane.api.post("/v1/images/import", params={"name": "x", "version": "1", "reference": "corral/app:1"},
                               headers=bearer("alpha"))
    assert ref.status_code == 422 and ref.json()["error"]["code"] == "registry_not_configured"
    # A missing blob is refused before any job exists.
    oci.layer_blob_names(layout)[0].unlink()
    bad = await plane.api.post("/v1/images/import", params={"name": "bad", "version": "1", "wait": "true"},
                               content=oci.tar_dir(layout, tmp_path / "bad.tar").read_bytes(),
                               headers={**TAR, **bearer("alpha")})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "missing_blob", bad.text


@pytest.mark.parametrize("method,path", [
    ("POST", "/v1/layers?kind=base&name=a&version=1"), ("GET", "/v1/layers"), ("GET", "/v1/layers/a/1"),
    ("DELETE", "/v1/layers/a/1"), ("POST", "/v1/environments"), ("GET", "/v1/environments"),
    ("GET", "/v1/environments/a"), ("DELETE", "/v1/environments/a"), ("GET", "/v1/images/usage"),
    ("POST", "/v1/images/import?name=a&version=1"), ("GET", "/v1/images/imports/imp-1"),
    ("POST", "/v1/sandboxes/sb-1/commit"), ("POST", "/v1/sandboxes/sb-1/fork?count=2"),
])
async def test_every_image_route_wants_an_api_key(plane, method, path):
    r = await plane.api.request(method, path, headers={"Authorization": "Bearer not-a-key-0123456789"})
    assert r.status_code == 401 and r.json()["error"]["details"][0]["loc"] == ["header", "authorization"]


async def test_commit_and_fork_of_another_tenants_or_no_sandbox_is_404(plane):
    for path in ("/v1/sandboxes/sb-0123456789abcdef/commit", "/v1/sandboxes/sb-0123456789abcdef/fork"):
        r = await plane.api.post(path, headers=bearer("alpha"))
        assert r.status_code == 404 and r.json()["error"]["details"][0]["loc"] == ["path", "sandbox_id"]
    bad = await plane.api.post("/v1/sandboxes/sb-1/fork", params={"count": 0}, headers=bearer("alpha"))
    assert bad.status_code == 422
