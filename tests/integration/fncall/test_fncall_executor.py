"""Real programs in real sandboxes (bubblewrap + cgroups on the judge runtime tree): every
verdict, every limit, isolation, and the no-carry-over guarantees on one reused worker."""

import signal
import time
from pathlib import Path

import pytest

from corral_common.contracts.fncall import FncallJob, JobCase

APLUSB = "#include <iostream>\nint main(){long long a,b;std::cin>>a>>b;std::cout<<a+b<<std::endl;}\n"
BOTH = pytest.mark.parametrize("zygote", [False, True], ids=["cold", "zygote"])


def job(runtime: str, code: str, **kw) -> FncallJob:
    return FncallJob(call_id="t", runtime=runtime, code=code, **kw)


async def run(worker, runtime, code, **kw):
    return await worker.run_job(job(runtime, code, **kw))


def cgroup_procs(worker) -> list[int]:
    return worker.cgroup.pids()


# -- verdicts, each from a real program ------------------------------------------------------

@BOTH
async def test_accepted_and_wrong_answer(make_worker, zygote):
    w = make_worker(zygote)
    r = await run(w, "python", "a, b = map(int, input().split())\nprint(a + b)",
                  cases=[JobCase(stdin="1 2", expected_stdout="3\n"), JobCase(stdin="2 2", expected_stdout="5\n")])
    assert [c.verdict for c in r.cases] == ["accepted", "wrong_answer"] and r.verdict == "wrong_answer"
    assert r.cases[0].stdout == "3\n" and r.cases[0].exit_code == 0
    assert r.cases[0].time_ms > 0 and r.cases[0].memory_kb > 0


async def test_cpp_compiles_once_and_runs_every_case(make_worker):
    w = make_worker()
    cases = [JobCase(stdin=f"{i} {i * 3}", expected_stdout=f"{i * 4}\n") for i in range(10)]
    started = time.monotonic()
    r = await run(w, "cpp", APLUSB, cases=cases)
    assert r.verdict == "accepted", r
    assert r.compile.verdict == "accepted" and len(r.cases) == 10
    assert time.monotonic() - started < 10


async def test_c_and_bash(make_worker):
    w = make_worker()
    c = await run(w, "c", '#include <stdio.h>\n#include <math.h>\nint main(){printf("%.0f\\n", sqrt(16.0));}',
                  cases=[JobCase(expected_stdout="4\n")])
    assert c.verdict == "accepted", c
    b = await run(w, "bash", 'read x; echo $((x * 2))', cases=[JobCase(stdin="21\n", expected_stdout="42\n")])
    assert b.verdict == "accepted", b


async def test_compile_error(make_worker):
    r = await run(make_worker(), "cpp", "int main( {", cases=[JobCase(expected_stdout="")])
    assert r.verdict == "compile_error" and r.cases == []
    assert "error" in r.compile.stderr and r.compile.exit_code != 0


@BOTH
async def test_runtime_error(make_worker, zygote):
    r = await run(make_worker(zygote), "python", "def f():\n    return 1 / 0\nf()")
    assert r.verdict == "runtime_error" and r.cases[0].exit_code == 1
    assert "ZeroDivisionError" in r.cases[0].stderr and 'File "/work/main.py", line 2' in r.cases[0].stderr
    seg = await run(make_worker(), "c", "int main(){int *p = 0; *p = 1; return 0;}")
    assert seg.verdict == "runtime_error" and seg.cases[0].signal == 11


@BOTH
async def test_time_limit_busy_loop_is_cut_at_the_cpu_limit(make_worker, zygote):
    w = make_worker(zygote)
    started = time.monotonic()
    r = await run(w, "python", "while True: pass", time_limit_ms=300)
    assert r.verdict == "time_limit_exceeded"
    assert time.monotonic() - started < 2.0  # cut near 300 ms of cpu, not at the wall limit


@BOTH
async def test_time_limit_sleep_forever_is_cut_at_the_wall_limit(make_worker, zygote):
    w = make_worker(zygote)
    started = time.monotonic()
    r = await run(w, "python", "import time\ntime.sleep(3600)", time_limit_ms=200)
    assert r.verdict == "time_limit_exceeded" and r.cases[0].time_ms < 200
    assert time.monotonic() - started < 3.0


@BOTH
async def test_memory_limit(make_worker, zygote):
    r = await run(make_worker(zygote), "python", "x = []\nwhile True:\n    x.append(bytearray(10**7))",
                  memory_limit_mb=64, time_limit_ms=5000)
    assert r.verdict == "memory_limit_exceeded", r
    assert 48 * 1024 < r.cases[0].memory_kb <= 64 * 1024 + 512


async def test_memory_limit_cpp(make_worker):
    code = "#include <vector>\n#include <cstdio>\nint main(){std::vector<char*> v; for(;;){char*p=new char[1<<20];" \
           "for(int i=0;i<(1<<20);i+=4096)p[i]=1; v.push_back(p);} }"
    r = await run(make_worker(), "cpp", code, memory_limit_mb=32, time_limit_ms=5000)
    assert r.verdict == "memory_limit_exceeded", r


@BOTH
async def test_output_limit_print_forever(make_worker, zygote):
    w = make_worker(zygote)
    started = time.monotonic()
    r = await run(w, "python", "while True:\n    print('y' * 1000)", output_limit_kb=64)
    assert r.verdict == "output_limit_exceeded"
    assert len(r.cases[0].stdout) == 64 * 1024
    assert time.monotonic() - started < 3.0


@BOTH
async def test_fork_bomb_is_contained_and_the_worker_stays_healthy(make_worker, zygote):
    w = make_worker(zygote)
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    started = time.monotonic()
    r = await run(w, "python", bomb, time_limit_ms=1000)
    assert r.verdict == "time_limit_exceeded"
    assert time.monotonic() - started < 5.0
    after = await run(w, "python", "print('alive')", cases=[JobCase(expected_stdout="alive\n")])
    assert after.verdict == "accepted"


async def test_bash_fork_bomb_hits_the_process_cap(make_worker):
    w = make_worker()
    r = await run(w, "bash", "for i in $(seq 200); do sleep 30 & done; wait", time_limit_ms=1000)
    assert r.verdict in ("time_limit_exceeded", "runtime_error")
    assert "fork" in r.cases[0].stderr.lower() or "resource" in r.cases[0].stderr.lower() \
        or r.verdict == "time_limit_exceeded"
    assert cgroup_procs(w) == []


# -- isolation ------------------------------------------------------------------------------

@BOTH
async def test_no_network_readonly_image_private_tmp(make_worker, zygote):
    code = """
import os, socket
try:
    socket.create_connection(("1.1.1.1", 53), timeout=1); print("net: yes")
except OSError as e:
    print("net: no")
for p in ("/usr/bin/evil", "/etc/passwd"):
    try:
        open(p, "a").write("x"); print("write", p, "yes")
    except OSError:
        print("write", p, "no")
print("uid", os.getuid(), "pid", os.getpid())
print("ifaces", sorted(n for _, n in socket.if_nameindex()))
os.system("mount -t tmpfs none /tmp 2>/dev/null || echo mount: denied")
os.system("unshare -m true 2>/dev/null || echo unshare: denied")
status = open("/proc/self/status").read()
print("caps", status.split("CapEff:")[1].split()[0], status.split("CapBnd:")[1].split()[0])
print(status.split("Seccomp:")[1].split()[0])
"""
    r = await run(make_worker(zygote), "python", code)
    out = r.cases[0].stdout
    assert "net: no" in out and "write /usr/bin/evil no" in out and "write /etc/passwd no" in out
    assert "uid 1000" in out and "ifaces ['lo']" in out and "mount: denied" in out and "unshare: denied" in out
    assert "caps 0000000000000000 0000000000000000" in out  # no capability left, not even in the bounding set
    assert out.strip().endswith("2")  # seccomp filter mode
    assert int(out.split("pid ")[1].split()[0]) < 10  # its own pid namespace


async def test_environment_is_cleared(make_worker, monkeypatch):
    monkeypatch.setenv("CORRAL_SECRET", "leak")
    r = await run(make_worker(), "bash", "env | sort")
    assert "CORRAL_SECRET" not in r.cases[0].stdout and "PATH=" in r.cases[0].stdout


@BOTH
async def test_files_are_given_and_importable(make_worker, zygote):
    import base64

    files = {"helper.py": base64.b64encode(b"X = 41\n").decode(), "data/in.txt": base64.b64encode(b"hi").decode()}
    r = await run(make_worker(zygote), "python", "import helper\nprint(helper.X + 1, open('data/in.txt').read())",
                  files=files)
    assert r.cases[0].stdout == "42 hi\n", r


# -- nothing carries over from call N to call N+1 on the same worker -----------------------------

@BOTH
async def test_no_carry_over(make_worker, zygote):
    w = make_worker(zygote)
    first = """
import os, subprocess, json, sys
open("/work/left.txt", "w").write("x")
open("/tmp/left.txt", "w").write("x")
open("/dev/shm/left.txt", "w").write("x")
os.environ["LEFT"] = "1"
subprocess.Popen(["/bin/sh", "-c", "sleep 600"], start_new_session=True)
subprocess.Popen(["/bin/sh", "-c", "while true; do echo x > /tmp/daemon; sleep 0.05; done"], start_new_session=True)
json.dumps = lambda *a, **k: "patched"
sys.modules["carry"] = type(sys)("carry")
import builtins; builtins.LEFT = 1
print("done")
"""
    r1 = await run(w, "python", first)
    assert r1.verdict == "accepted" and r1.cases[0].stdout == "done\n"
    assert cgroup_procs(w) == []  # the run cgroup is empty after the call (a zygote has a cgroup of its own)
    second = """
import os, json, sys, builtins, subprocess
print(os.path.exists("/work/left.txt"), os.path.exists("/tmp/left.txt"), os.path.exists("/tmp/daemon"),
      os.path.exists("/dev/shm/left.txt"))
print(os.environ.get("LEFT"), json.dumps(1), "carry" in sys.modules, hasattr(builtins, "LEFT"))
print(sorted(p for p in os.listdir("/proc") if p.isdigit()).__len__())
print(subprocess.run(["/bin/sh", "-c", "ls /proc | grep -c '^[0-9]'"], capture_output=True, text=True).stdout.strip())
"""
    r2 = await run(w, "python", second)
    lines = r2.cases[0].stdout.splitlines()
    assert lines[0] == "False False False False", r2
    assert lines[1] == "None 1 False False"
    assert int(lines[2]) <= 3  # init, itself (no sleep or daemon left from call 1)


@BOTH
async def test_each_call_has_its_own_random_state(make_worker, zygote):
    """A forked interpreter must not hand every call the same random sequence."""
    w = make_worker(zygote)
    code = "import random, os\nprint(random.random(), os.urandom(8).hex())"
    outs = [(await run(w, "python", code)).cases[0].stdout for _ in range(3)]
    assert len(set(outs)) == 3, outs


@BOTH
async def test_a_signal_the_program_sends_itself_ends_it(make_worker, zygote):
    r = await run(make_worker(zygote), "python", "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\nprint('on')")
    assert r.verdict == "runtime_error" and r.cases[0].signal == signal.SIGTERM and r.cases[0].stdout == ""


@BOTH
async def test_the_process_limit_holds_in_every_run(make_worker, zygote):
    w = make_worker(zygote)
    code = """
import subprocess
started = refused = 0
for _ in range(100):
    try:
        subprocess.Popen(["sleep", "30"]); started += 1
    except OSError:
        refused += 1
print(started, refused)
"""
    r = await run(w, "python", code)
    started, refused = map(int, r.cases[0].stdout.split())
    assert started < 64 and refused > 0, r.cases[0]
    assert cgroup_procs(w) == []  # and the sleeps are gone with the run


async def test_a_dead_zygote_is_replaced_and_the_next_call_answered(make_worker):
    w = make_worker(zygote=True)
    assert (await run(w, "python", "print(1)")).verdict == "accepted"
    w.zygote_cgroup.kill_all()  # the zygote (and its sandbox) die between calls
    r = await run(w, "python", "print(2)")
    assert r.verdict in ("accepted", "system_error")  # the call that finds it dead may fail, never hang
    r = await run(w, "python", "print(3)")
    assert r.verdict == "accepted" and r.cases[0].stdout == "3\n"
    assert w.zygote_starts == 2


async def test_no_carry_over_between_cases_of_one_call(make_worker):
    code = "import os\nprint(os.path.exists('state'))\nopen('state', 'w').write('1')"
    r = await run(make_worker(), "python", code, cases=[JobCase(), JobCase()])
    assert [c.stdout for c in r.cases] == ["False\n", "False\n"]


async def test_worker_healthy_after_every_abuse(make_worker):
    w = make_worker(zygote=True)
    abuses = ["while True: pass", "import time\ntime.sleep(3600)", "x = ' ' * (1 << 34)",
              "while True:\n    print('y' * 4096)", "import os\nwhile True:\n    os.fork()"]
    for code in abuses:
        r = await run(w, "python", code, time_limit_ms=300, memory_limit_mb=64, output_limit_kb=16)
        assert r.verdict != "accepted" and r.verdict != "system_error", (code, r)
    ok = await run(w, "python", "print(sum(range(1000)))", cases=[JobCase(expected_stdout="499500\n")])
    assert ok.verdict == "accepted"
    left = [p.name for p in Path(w.scratch).glob("*") if p.name != "zygote.log"] if Path(w.scratch).exists() else []
    assert left == []  # no call's files left on the host
    assert w.zygote_starts == 1  # the abuse never reached the zygote


async def test_fetch_files_reads_back_the_working_dir(make_worker):
    r = await run(make_worker(), "python", "open('out.txt', 'w').write('hello')\nimport os\nos.symlink('/etc/passwd', 'p')",
                  fetch_files=["out.txt", "p", "../x", "missing"])
    assert r.verdict == "accepted" and r.files == {"out.txt": "aGVsbG8="}


@BOTH
async def test_exit_and_quit_work(make_worker, zygote):
    w = make_worker(zygote)
    r = await run(w, "python", "print('a')\nexit(3)")
    assert r.verdict == "runtime_error" and r.cases[0].exit_code == 3 and r.cases[0].stdout == "a\n"
    r = await run(w, "python", "import sys\nprint(sys.argv, __name__)\nquit()")
    assert r.verdict == "accepted" and r.cases[0].stdout == "['main.py'] __main__\n"


async def test_zygote_worker_forks_every_run_from_one_zygote(make_worker):
    w = make_worker(zygote=True)
    for _ in range(3):
        r = await run(w, "python", "print(1)")
        assert r.verdict == "accepted"
    assert w.zygote_runs == 3 and w.cold_runs == 0 and w.zygote_starts == 1


async def test_a_zygote_that_cannot_start_leaves_calls_to_the_cold_path(make_worker, monkeypatch):
    import corral_node_agent.fncall.zygote as zygote

    monkeypatch.setattr(zygote, "ZYGOTE_SOURCE", "import sys\nsys.exit(3)\n")
    w = make_worker(zygote=True)
    for i in range(2):
        r = await run(w, "python", f"print({i})")
        assert r.verdict == "accepted" and r.cases[0].stdout == f"{i}\n"
    assert w.zygote_starts == 0 and w.cold_runs == 2 and w.zygote_runs == 0
