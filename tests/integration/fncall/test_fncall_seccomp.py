"""The fncall-default syscall profile and the /proc masks in real fncall runs: the cold path
(bwrap --seccomp) and the zygote's children (which install the same program themselves)."""

import signal

import pytest

from corral_common.contracts.fncall import FncallJob, JobCase
from tests.syscall_probe import PROBE_C, PYTHON_PROBE, errnos, expected, probe_input

BOTH = pytest.mark.parametrize("zygote", [False, True], ids=["cold", "zygote"])


async def run(worker, runtime, code, *stdins):
    job = FncallJob(call_id="t", runtime=runtime, code=code, cases=[JobCase(stdin=s) for s in stdins or [""]])
    return await worker.run_job(job)


@BOTH
async def test_python_calls_get_the_profiles_errno(make_worker, zygote):
    w = make_worker(zygote)
    r = await run(w, "python", PYTHON_PROBE, probe_input())
    assert r.verdict == "accepted", r
    assert errnos(r.cases[0].stdout) == expected("fncall")
    assert not zygote or w.zygote_runs == 1


async def test_c_compiles_under_the_filter_and_its_calls_are_refused(make_worker):
    r = await run(make_worker(), "c", PROBE_C.read_text(), probe_input(), "int80\n")
    assert r.compile.verdict == "accepted", r.compile  # gcc, as and ld under fncall-default
    assert errnos(r.cases[0].stdout) == expected("fncall")
    assert r.cases[1].verdict == "runtime_error" and r.cases[1].signal == signal.SIGSYS  # no 32-bit syscalls


@BOTH
async def test_host_tables_are_masked_or_unreadable(make_worker, zygote):
    code = """
import os
for p in ("/proc/cmdline", "/proc/keys", "/proc/kpageflags", "/proc/kpagecount", "/proc/kpagecgroup",
          "/proc/slabinfo", "/proc/timer_list", "/proc/kcore"):
    try:
        print(p, len(open(p, "rb").read()))
    except OSError as e:
        print(p, e.strerror)
print("acpi", os.listdir("/proc/acpi") if os.path.isdir("/proc/acpi") else [])
try:
    open("/dev/left", "w"); print("dev: writable")
except OSError:
    print("dev: read-only")
"""
    r = await run(make_worker(zygote), "python", code)
    lines = r.cases[0].stdout.splitlines()
    assert lines[:2] == ["/proc/cmdline 0", "/proc/keys 0"], r  # readable by anyone on the host: covered
    for line in lines[2:-2]:  # root-only on the host: the run (nobody, no capability) cannot open them
        assert line.endswith((" 0", "Permission denied", "No such file or directory")), line
    assert lines[-2] == "acpi []"
    # cold: a fresh /dev per run; zygote: the sandbox's /dev, read-only in each call
    assert lines[-1] == ("dev: read-only" if zygote else "dev: writable")
