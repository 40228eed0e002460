"""Create a sandbox, run a command, write and read a file, delete it; then the same on a microVM
(CORRAL_URL, CORRAL_API_KEY)."""

from corral import Corral

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
