"""Bring your own environment, end to end through the SDK: a real image (umoci, then skopeo's
docker-archive) imported → a sandbox honouring its PATH, WorkingDir and User → commit → fork 4,
each fork seeing the committed state (a new file and a deletion)."""

import os

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
