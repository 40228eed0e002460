"""A test process must end when its session does. A thread a test leaked (a served app's loop
still running, a worker blocked in a read that never returns) keeps the interpreter from
exiting: concurrent.futures joins every executor worker at shutdown, so one stuck
``asyncio.to_thread`` call hangs `make test` until CI kills it, with nothing on screen but the
leaked loop's own logging. This plugin arms a watchdog as the session finishes (its fixtures
are torn down by then): if the process is still alive after a grace period (the other plugins'
sessionfinish hooks, the summary and the interpreter's exit all fit in it), it prints what every other thread is doing (to say
which test leaked what) and exits with the session's own status."""

import os
import sys
import threading
import traceback
from pathlib import Path

import pytest

GRACE_S = float(os.environ.get("CORRAL_TEST_EXIT_GRACE_S", "120"))


def thread_report() -> str:
    """Each live thread but this one: its name, daemon or not, and its innermost frames."""
    names = {t.ident: t for t in threading.enumerate()}
    lines = []
    for ident, frame in sys._current_frames().items():
        if ident == threading.get_ident():
            continue
        thread = names.get(ident)
        label = f"{thread.name}{' (daemon)' if thread.daemon else ''}" if thread else f"thread {ident}"
        frames = traceback.extract_stack(frame)[-4:]
        lines.append(f"- {label}: " + " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}"
                                                   for f in reversed(frames)))
    return "\n".join(lines)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus) -> None:
    if hasattr(session.config, "workerinput"):
        # An xdist worker's session ends when it has no more tests, but it lives on until the
        # controller closes it, after the other workers are done too (and terminates it, if
        # stuck, itself): exiting here would look like a crash, and the worker xdist starts
        # in its place would wait for work that never comes.
        return

    def watch() -> None:
        # A clock, not a synchronisation: the wait ends only by timing out (or with the process).
        threading.Event().wait(GRACE_S)
        sys.stderr.write(f"\n{thread_report()}\npytest: the process was still alive {GRACE_S:.0f} s after the "
                         "session ended, held by the threads above; exiting with the session's status\n")
        sys.stderr.flush()
        # The session's verdict stands: a leak is reported above, not turned into a failure.
        os._exit(int(exitstatus))

    threading.Thread(target=watch, name="exit-watchdog", daemon=True).start()
