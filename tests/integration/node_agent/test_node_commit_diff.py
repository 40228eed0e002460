"""A container's upper dir as a commit: overlay whiteouts and opaque dirs written as an OCI
diff tar (node-agent), rebuilt by image-service as a diff layer in overlay form; the base and
that layer, overlaid, show exactly what the sandbox saw."""

import os
import stat
import tarfile

import pytest
from fastapi.testclient import TestClient

from corral_image_service.app import create_app
from corral_node_agent.backends.container.diff import write_diff_tar
from tests.integration.image_service.helpers import image_settings, make_tree, tar_of
from tests.integration.image_service.test_image_import import mounted_layers

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="whiteout devices, trusted xattrs and mounts need root")

BASE = 300000  # the sandbox's host id range starts here


def test_upper_dir_round_trips_through_a_diff_layer(tmp_path):
    upper = tmp_path / "upper"
    (upper / "etc").mkdir(parents=True)
    os.mknod(upper / "etc/os-release", stat.S_IFCHR | 0o000, os.makedev(0, 0))  # deleted
    (upper / "opt").mkdir()
    os.setxattr(upper / "opt", "trusted.overlay.opaque", b"y")  # everything below hidden
    (upper / "opt/new").write_text("new\n")
    os.link(upper / "opt/new", upper / "opt/again")
    os.symlink("/opt/new", upper / "opt/link")
    (upper / "home/user").mkdir(parents=True)
    (upper / "home/user/work.txt").write_text("work\n")
    for path in (upper / "home/user", upper / "home/user/work.txt"):
        os.chown(path, BASE + 1000, BASE + 1000)

    out = tmp_path / "diff.tar"
    write_diff_tar(str(upper), str(out), BASE, 65536)
    with tarfile.open(out) as tf:
        members = {m.name: m for m in tf.getmembers()}
    assert {"etc/.wh.os-release", "opt/.wh..wh..opq"} <= set(members)
    assert members["opt/again"].isfile() and members["opt/new"].islnk()  # one file, in name order
    assert members["opt/new"].linkname == "opt/again"
    assert (members["home/user/work.txt"].uid, members["home/user/work.txt"].gid) == (1000, 1000)
    assert members["opt/link"].issym() and members["opt/link"].linkname == "/opt/new"

    data = tmp_path / "images"
    with TestClient(create_app(image_settings(data))) as client:
        base_tree = make_tree(tmp_path / "base", {"etc/os-release": "ID=base\n", "etc/keep": "kept\n",
                                                  "opt/old": "old\n", "bin/sh": "#!\n"})
        base = client.post("/v1/layers", params={"kind": "base", "name": "b", "version": "1"},
                           content=tar_of(base_tree), headers={"Content-Type": "application/x-tar"}).json()
        diff = client.post("/v1/layers", params={"kind": "diff", "name": "d", "version": "1", "owner": "acme"},
                           content=out.read_bytes(), headers={"Content-Type": "application/x-tar"})
        assert diff.status_code == 201, diff.text
        env = client.post("/v1/environments", params={"owner": "acme"},
                          json={"name": "committed", "base": "b:1", "diffs": ["d:1"]})
        assert env.status_code == 201, env.text
        assert [x["kind"] for x in env.json()["layers"]] == ["base", "diff"]
        with mounted_layers(data, [base["digest"], diff.json()["digest"]], tmp_path / "mnt") as root:
            assert sorted(os.listdir(root / "etc")) == ["keep"]
            assert sorted(os.listdir(root / "opt")) == ["again", "link", "new"]
            assert (root / "opt/again").stat().st_ino == (root / "opt/new").stat().st_ino
            assert (root / "home/user/work.txt").stat().st_uid == 1000
