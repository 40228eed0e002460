"""Bring your own environment, end to end through the SDK: a real image (umoci, then skopeo's
docker-archive) imported → a sandbox honouring its PATH, WorkingDir and User → commit → fork 4,
each fork seeing the committed state (a new file and a deletion)."""

import os
import time

import pytest

from corral import Corral, CorralError
from tests.e2e.conftest import OTHER_TENANT_KEY
from tests.integration.image_service import oci_images as oci

pytestmark = pytest.mark.skipif(bool(oci.missing_tools()), reason=oci.missing_tools() or "tools present")

PROBE = ["sh", "-c", "echo $PATH; pwd; id -u; id -g; echo $GREETING; hello; cat replaced.txt; ls"]


def test_import_exec_commit_fork(platform, tmp_path):
    archive = oci.docker_archive(oci.build_app_image(tmp_path / "oci"), tmp_path / "app.tar")
    suffix = os.urandom(3).hex()
    with Corral(platform["api"], platform["api_key"]) as corral:
        job = corral.images.import_image(archive, name=f"app-{suffix}", version="1")
        assert str(job.state) == "succeeded" and job.result.layers == [f"app-{suffix}:1"]
        env = corral.environments.get(f"app-{suffix}")
        assert env.config.cwd == "/opt/app" and env.config.user == "1001:1002"

        with corral.sandboxes.create(f"app-{suffix}", memory_mb=64) as sb:
            out = sb.exec(PROBE)
            assert out.exit_code == 0, out.stderr
            assert out.stdout.split("\n")[:7] == ["/opt/app/bin:/usr/bin:/bin", "/opt/app", "1001", "1002",
                                                 "from-image", "hello from the image", "new"]
            assert out.stdout.split("\n")[7:-1] == ["bin", "hl", "keep.txt", "replaced.txt"]
            # An exec's own cwd and user still win.
            assert sb.exec("pwd; id -u", cwd="/tmp", user="root").stdout.split() == ["/tmp", "0"]

            changed = sb.exec("rm /opt/app/keep.txt && echo committed > /opt/app/state.txt", user="root")
            assert changed.exit_code == 0, changed.stderr
            committed = sb.commit(environment=f"app-{suffix}-c1")
            assert str(committed.layer.kind) == "diff" and committed.environment.diffs == [committed.layer.ref]
            assert sb.exec("cat state.txt").stdout == "committed\n"  # it ran on

            forks = sb.fork(4)
            assert len(forks) == 4 and {f.state for f in forks} == {"running"}
            try:
                for fork in forks:
                    assert fork.info.labels["corral.forked_from"] == sb.id
                    seen = fork.exec("cat state.txt; ls; pwd; id -u")
                    assert seen.exit_code == 0, seen.stderr
                    assert seen.stdout.split() == ["committed", "bin", "hl", "replaced.txt", "state.txt",
                                                   "/opt/app", "1001"]
                    fork.write_file("/tmp/mine", fork.id)  # forks do not share a writable layer
                assert {f.read_file("/tmp/mine").decode() for f in forks} == {f.id for f in forks}
            finally:
                corral.sandboxes.delete_many(forks)

        # The committed environment is an environment like any other.
        with corral.sandboxes.create(f"app-{suffix}-c1", memory_mb=64) as again:
            assert again.exec("cat state.txt; ls keep.txt 2>&1 || echo deleted").stdout.split()[0] == "committed"

    with Corral(platform["api"], OTHER_TENANT_KEY) as other:
        with pytest.raises(CorralError) as refused:
            other.sandboxes.create(f"app-{suffix}", memory_mb=64)
        assert refused.value.code == "unknown_environment"
        with pytest.raises(CorralError) as hidden:
            other.environments.get(f"app-{suffix}")
        assert hidden.value.status == 404


def test_microvm_fork_restores_its_snapshot_n_times(vm_platform):
    """A VM forks from a snapshot: memory included, so a process it runs keeps running in each
    fork, and every fork has its own copy of the disk."""
    with Corral(vm_platform["api"], vm_platform["api_key"]) as corral:
        sb = corral.sandboxes.create("busybox", backend="microvm", memory_mb=256, wait_timeout=180)
        forks = []
        try:
            sb.write_file("kept.txt", "before the fork")
            sb.exec("(while true; do date +%s%N > /tmp/tick; sleep 0.1; done) </dev/null >/dev/null 2>&1 &")
            forks = sb.fork(2, wait_timeout=180)
            assert len(forks) == 2
            for fork in forks:
                assert fork.info.backend == "microvm" and fork.info.node_id == sb.info.node_id
                assert fork.read_file("/home/user/kept.txt") == b"before the fork"
                assert fork.info.labels["corral.forked_from"] == sb.id
                fork.write_file("own.txt", fork.id)
            assert [f.read_file("/home/user/own.txt").decode() for f in forks] == [f.id for f in forks]
            first = forks[0].read_file("/tmp/tick")
            deadline = time.monotonic() + 30
            while forks[0].read_file("/tmp/tick") == first:  # the background process came back too
                assert time.monotonic() < deadline, "the forked VM's process does not run"
            with pytest.raises(CorralError) as refused:
                sb.commit()
            assert refused.value.code == "unsupported_by_backend"
        finally:
            corral.sandboxes.delete_many([sb, *forks])


def test_container_fork_with_processes_is_a_clear_409(platform):
    with Corral(platform["api"], platform["api_key"]) as corral:
        with corral.sandboxes.create("busybox", memory_mb=64) as sb:
            r = corral.http.post(f"/v1/sandboxes/{sb.id}/fork", params={"count": 1, "processes": "true"})
            assert r.status_code == 409 and r.json()["error"]["code"] == "criu_unavailable"
            assert "CRIU" in r.json()["error"]["message"]
