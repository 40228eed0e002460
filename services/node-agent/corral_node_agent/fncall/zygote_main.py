"""The python zygote: runs INSIDE a worker's bwrap sandbox with the judge tree's ``python3``.

Standalone on purpose (the judge tree has no Corral code): the node-agent gives this file's
text to ``python3 -E -s -S -`` on stdin. Never imported by the node-agent.

Start-up (once per worker): the interpreter initialises, reads the seccomp filter, and moves
into a pid namespace of its own (so that it may later create and leave child pid namespaces:
bwrap's own pid namespace belongs to an outer user namespace where this process has no
capabilities). It then waits on its control socket.

Per call (the agent sends one datagram: a memfd with the marshalled job, and the write ends
of the stdout and stderr pipes) the zygote creates a new pid namespace for its next child
and forks it. That child, pid 1 of the new namespace:

- writes ``0`` to the worker's run cgroup ``cgroup.procs`` fds (opened by the agent as root),
  so from here on everything the call starts is in the run cgroup, with the call's
  memory/pids limits and fresh cpu/peak counters; then closes every zygote fd;
- unshares mount/ipc/uts namespaces, mounts a fresh size-limited tmpfs on /work, /tmp and
  /dev/shm (the rest of /dev, the zygote's, read-only) and a proc for its pid namespace
  (covering the masked paths the agent named: files with /dev/null, directories with an empty
  read-only tmpfs), writes the call's files into /work;
- sets the rlimits, drops every capability, installs the seccomp filter (after the mounts:
  the filter denies mount/unshare) and runs the code as ``__main__`` in the already
  initialised interpreter, then exits like ``python3 main.py`` would (threads joined, atexit
  handlers, flushed streams). Its exit as pid 1 kills whatever it left running.

The program runs as pid 1 rather than under a separate reaper: a second fork of the
interpreter per call cost ~1.5 ms of CPU (a quarter of the sandbox's cost). What differs
from a process under an init: ``os.getpid() == 1``; orphaned grandchildren are re-parented
to it (zombies until the call ends, within the pids limit); signals from inside the
namespace need a handler to take effect, so the terminating ones get one that exits with
128+N (SIGKILL/SIGSTOP sent to itself from inside are ignored, as for any init).

The zygote never runs user code and never changes after start-up, so nothing a call does
(files, environment, modules, background processes) can reach the next call.
"""

import _sitebuiltins
import atexit
import builtins
import ctypes
import gc
import marshal
import os
import resource
import signal
import socket
import struct
import sys

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWPID = 0x20000, 0x04000000, 0x08000000, 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 32, 4096, 16384, 1 << 18
PR_CAPBSET_DROP, PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 24, 22, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL, SECCOMP_MODE_FILTER = 4, 2
CAP_VERSION_3 = 0x20080522
SETUP_FAILED = 125
# As pid 1 of its namespace the program would ignore these when they come from inside it
# (its own os.kill, an alarm without a handler): a handler makes them end it as they would
# end `python3 main.py` (reported as 128+N, like a signal). The program may install its own.
TERMINATING_SIGNALS = (signal.SIGHUP, signal.SIGQUIT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2,
                       signal.SIGALRM, signal.SIGVTALRM, signal.SIGPROF)

_libc = ctypes.CDLL(None, use_errno=True)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


def _check(result, what):
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source, target, fstype, flags, data):
    _check(_libc.mount(source, target, fstype, flags, data), f"mount {target.decode()}")


def _drop_capabilities(last_cap):
    _check(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient caps")
    for cap in range(last_cap + 1):
        _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    header = struct.pack("Ii", CAP_VERSION_3, 0)
    data = bytes(24)  # two {effective, permitted, inheritable} sets, all empty
    _check(_libc.capset(header, data), "capset")


def _install_seccomp(program):
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    prog = _SockFprog(len(program) // 8, program)
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0), "seccomp")


def _read_all(fd):
    chunks = []
    os.lseek(fd, 0, os.SEEK_SET)
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _exit_status(status):
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else SETUP_FAILED


def _run_main(job, stdin_fd, out_fd, err_fd, config):
    """Limits, no capabilities, seccomp, then the user code. Never returns once that started."""
    os.dup2(stdin_fd, 0)
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    os.closerange(3, 1 << 16)
    os.setsid()
    for name, value in (("RLIMIT_CPU", job["cpu_s"]), ("RLIMIT_FSIZE", job["fsize"]),
                        ("RLIMIT_NOFILE", job["nofile"]), ("RLIMIT_CORE", 0), ("RLIMIT_STACK", job["stack"])):
        try:
            resource.setrlimit(getattr(resource, name), (value, value))
        except (ValueError, OSError):
            resource.setrlimit(getattr(resource, name), (min(value, resource.getrlimit(getattr(resource, name))[1]),) * 2)
    _drop_capabilities(config["last_cap"])
    _install_seccomp(config["seccomp"])
    for signum in TERMINATING_SIGNALS:
        signal.signal(signum, _end_by_signal)
    _run_user_code(job["code"])


def _end_by_signal(signum, frame):
    os._exit(128 + signum)


def _run_user_code(code):
    """As ``python3 -E -s main.py`` in /work: ``__main__``, argv, sys.path[0], exit code."""
    builtins.exit = _sitebuiltins.Quitter("exit", "Ctrl-D (i.e. EOF)")
    builtins.quit = _sitebuiltins.Quitter("quit", "Ctrl-D (i.e. EOF)")
    main = type(sys)("__main__")
    main.__file__ = "/work/main.py"
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    sys.argv[:] = ["main.py"]
    sys.path[0:1] = ["/work"]
    status = 0
    try:
        try:
            compiled = compile(code, "/work/main.py", "exec")
        except SyntaxError as exc:
            sys.excepthook(type(exc), exc.with_traceback(None), None)
            status = 1
        else:
            del code
            try:
                exec(compiled, main.__dict__)
            except BaseException as exc:  # the traceback as `python3 main.py` prints it, without this frame
                if not isinstance(exc, SystemExit):
                    exc.__traceback__ = exc.__traceback__.tb_next
                raise
    except SystemExit as exc:
        status = _system_exit_status(exc)
    except BaseException as exc:
        sys.excepthook(type(exc), exc, exc.__traceback__)
        status = 1
    _finalize(status)


def _system_exit_status(exc):
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        print(code, file=sys.stderr)
    except Exception:
        pass
    return 1


def _finalize(status):
    """What interpreter shutdown does that a program can notice: join threads, atexit, flush."""
    try:
        threading = sys.modules.get("threading")
        if threading is not None:
            threading._shutdown()
        atexit._run_exitfuncs()
    except SystemExit as exc:
        status = _system_exit_status(exc)
    except BaseException as exc:
        sys.excepthook(type(exc), exc, exc.__traceback__)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            if stream is sys.stdout:
                status = 120  # as CPython when flushing stdout fails at exit
    os._exit(status)


def _report_setup_failure(fd, exc):
    try:
        os.write(fd, f"corral-zygote: {type(exc).__name__}: {exc}\n".encode())
    except OSError:
        pass


def _run_call(control, payload_fd, out_fd, err_fd, config):
    """pid 1 of the call's pid namespace: join the run cgroup, build the call's mounts and
    files, then become the program (``_run_main``). Never returns."""
    try:
        for fd in config["cgroup_fds"]:
            os.write(fd, b"0")
        for fd in (*config["cgroup_fds"], config["pidns_fd"]):
            os.close(fd)
        control.close()
        job = marshal.loads(_read_all(payload_fd))
        os.close(payload_fd)
        _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS), "unshare")
        _mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None)
        size = str(job["tmpfs_bytes"]).encode()
        _mount(b"tmpfs", b"/work", b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0755,size=" + size)
        _mount(b"tmpfs", b"/tmp", b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=1777,size=" + size)
        _mount(b"tmpfs", b"/dev/shm", b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=1777,size=" + size)
        # The zygote sandbox's /dev outlives the call: read-only here, or a file left in it
        # would reach the next call.
        _mount(None, b"/dev", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
        _mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
        for path in config["masked_files"]:
            _mount(b"/dev/null", path, None, MS_BIND, None)
        for path in config["masked_dirs"]:
            _mount(b"tmpfs", path, b"tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, b"size=4k")
        os.chdir("/work")
        for rel, data in job["files"]:
            if os.path.dirname(rel):
                os.makedirs(os.path.dirname(rel), exist_ok=True)
            with open(rel, "wb") as fh:
                fh.write(data)
        with open("main.py", "w") as fh:
            fh.write(job["code"])
        stdin_fd = os.memfd_create("stdin")
        os.write(stdin_fd, job["stdin"])
        os.lseek(stdin_fd, 0, os.SEEK_SET)
    except BaseException as exc:
        _report_setup_failure(err_fd, exc)
        os._exit(SETUP_FAILED)
    try:
        _run_main(job, stdin_fd, out_fd, err_fd, config)
    except BaseException as exc:  # before the user code ran (after it, _run_main exits itself)
        _report_setup_failure(2, exc)
    os._exit(SETUP_FAILED)


def serve(control, config):
    while True:
        try:
            _, fds, _, _ = socket.recv_fds(control, 16, 3)
        except InterruptedError:
            continue
        if len(fds) != 3:
            os._exit(0)  # the agent closed the socket (or sent garbage): the worker is going away
        payload_fd, out_fd, err_fd = fds
        _check(_libc.unshare(CLONE_NEWPID), "unshare pid")
        pid = os.fork()
        if pid == 0:
            try:
                _run_call(control, payload_fd, out_fd, err_fd, config)
            finally:  # a child never returns into this loop
                os._exit(SETUP_FAILED)
        _check(_libc.setns(config["pidns_fd"], CLONE_NEWPID), "setns pid")  # the next child starts from here again
        for fd in fds:
            os.close(fd)
        _, status = os.waitpid(pid, 0)
        control.send(struct.pack("i", status))


def start():
    control_fd, seccomp_fd, masked_files, masked_dirs, *cgroup_fds = sys.argv[1:]
    control_fd, seccomp_fd, cgroup_fds = int(control_fd), int(seccomp_fd), [int(fd) for fd in cgroup_fds]
    seccomp = _read_all(seccomp_fd)
    os.close(seccomp_fd)
    with open("/proc/sys/kernel/cap_last_cap") as fh:
        last_cap = int(fh.read())
    _check(_libc.unshare(CLONE_NEWPID), "unshare pid")  # a pid namespace owned by our user namespace
    zygote = os.fork()
    if zygote:
        _, status = os.waitpid(zygote, 0)
        os._exit(_exit_status(status))
    control = socket.socket(fileno=control_fd)
    config = {"seccomp": seccomp, "last_cap": last_cap, "cgroup_fds": cgroup_fds,
              "pidns_fd": os.open("/proc/self/ns/pid", os.O_RDONLY),
              "masked_files": [p.encode() for p in masked_files.split(",") if p],
              "masked_dirs": [p.encode() for p in masked_dirs.split(",") if p]}
    gc.freeze()  # what exists now is never collected: forked children leave these pages shared
    control.send(b"ready")
    serve(control, config)


if __name__ == "__main__":  # (run as `python3 -`; importing it must not start a zygote)
    start()
