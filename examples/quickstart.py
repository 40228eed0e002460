"""Create a sandbox, run a command, write and read a file, delete it; the same on a microVM; then,
when the Debian base is registered (`make up` does), a SWE-style task: a small repository as a
workspace layer, its tests run, fixed, committed, and forked (CORRAL_URL, CORRAL_API_KEY)."""

import io
import tarfile
import time

from corral import Corral, CorralError

REPO = {
    "repo/calc.py": "def add(a, b):\n    return a - b  # the bug the task is about\n",
    "repo/test_calc.py": "import unittest\nfrom calc import add\n\n\nclass TestAdd(unittest.TestCase):\n"
                         "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n",
}


def workspace_tar(files: dict[str, str], uid: int = 1000) -> str:
    """The repository as a tar file whose files belong to the sandbox's user (uid 1000), so it
    can edit them."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name in sorted({"repo", *files}):
            data = files.get(name)
            info = tarfile.TarInfo(name)
            info.uid = info.gid = uid
            info.mtime = int(time.time())
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tf.addfile(info)
            else:
                raw = data.encode()
                info.size, info.mode = len(raw), 0o644
                tf.addfile(info, io.BytesIO(raw))
    path = "quickstart-repo.tar"
    with open(path, "wb") as fh:
        fh.write(buf.getvalue())
    return path


with Corral() as corral:
    with corral.sandboxes.create("busybox", memory_mb=128, labels={"example": "quickstart"}) as sandbox:
        print("sandbox", sandbox.id, "on", sandbox.info.node_id)
        result = sandbox.exec("echo hello from $(hostname) as $(id -un)")
        print("exec:", result.exit_code, result.stdout.strip())
        sandbox.write_file("notes/hello.txt", "written through the SDK\n")
        print("file:", sandbox.read_file("notes/hello.txt").decode().strip())
        print("ls:", [f.name for f in sandbox.list_files("notes")])

    # The same calls on a microVM (a hardware boundary: its own kernel under QEMU).
    with corral.sandboxes.create("busybox", isolation="vm", memory_mb=256, wait_timeout=180) as vm:
        runtime = vm.info.runtime.to_dict() if hasattr(vm.info.runtime, "to_dict") else vm.info.runtime
        print("microvm", vm.id, "backend", vm.info.backend, runtime)
        print("exec:", vm.exec("uname -sr; echo hello from $(hostname)").stdout.strip().replace("\n", " | "))

    # A SWE-style task: the repository is a workspace layer over the shared Debian base.
    try:
        corral.environments.get("debian-python")
    except CorralError:
        print("no debian-python environment (make up registers it): skipping the repository example")
        raise SystemExit(0) from None
    version = str(int(time.time()))
    layer = corral.layers.upload(workspace_tar(REPO), kind="workspace", name="quickstart-repo", version=version)
    corral.environments.create(f"quickstart-repo-{version}", base="debian-python:1", workspace=layer.ref,
                               config={"cwd": "/repo"})
    with corral.sandboxes.create(f"quickstart-repo-{version}", memory_mb=256) as task:
        before = task.exec("python3 -m unittest -q")
        print("tests before the fix: exit", before.exit_code, "|", before.stderr.strip().splitlines()[-1])
        task.write_file("/repo/calc.py", "def add(a, b):\n    return a + b\n")
        after = task.exec("python3 -m unittest -q")
        print("tests after the fix: exit", after.exit_code, "|", after.stderr.strip().splitlines()[-1])
        task.commit(environment=f"quickstart-fixed-{version}")
        print("committed as environment", f"quickstart-fixed-{version}")
        for fork in task.fork(2):
            with fork:
                print("fork", fork.id, "tests:", fork.exec("python3 -m unittest -q").exit_code)
