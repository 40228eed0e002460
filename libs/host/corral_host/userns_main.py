"""Makes user namespaces for the node-agent, owned by a given host uid (userns.py).

Standalone on purpose: the agent runs this file as ``python -S userns_main.py`` once and
keeps it (never imported). It is a small single-threaded process, so forking it costs a
fraction of a millisecond, where the agent itself (big, threaded) could only start a fresh
``setpriv ... unshare --user`` chain of programs: ~3 ms more per sandbox under load.

Per line ``<uid>`` on stdin it forks a child that drops to uid/gid ``<uid>`` (no
supplementary groups), unshares a user namespace (owned by that uid) and waits to be killed;
it answers ``<pid>`` once the namespace exists (``-<errno>`` when it could not). The agent,
root in the parent namespace, writes the child's uid/gid maps and joins or opens
/proc/<pid>/ns/user, then kills the child. Children die with this process, and this
process ends when the agent does (its stdin closes).
"""

import ctypes
import os
import signal
import sys

CLONE_NEWUSER = 0x10000000
PR_SET_PDEATHSIG = 1


def child(uid: int, ready: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    # (A credential change clears the parent-death signal: set it after.)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1:
        os._exit(1)  # the helper is already gone
    if libc.unshare(CLONE_NEWUSER) != 0:
        os.write(ready, str(-ctypes.get_errno()).encode())
        os._exit(1)
    os.write(ready, b"ok")
    while True:
        signal.pause()


def main() -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children reap themselves
    for line in sys.stdin:
        uid = int(line)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(r)
                child(uid, w)
            finally:
                os._exit(1)
        os.close(w)
        said = os.read(r, 16).decode()
        os.close(r)
        sys.stdout.write(f"{pid if said == 'ok' else said or -1}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
