"""The `corral` command line through its installed entry point, against the live platform.

Every test runs the real console script (``pip install -e clients/python`` makes it) in a
subprocess, with the url and key from the environment or a profile file in a temp dir, and
checks what a person or a script sees: output, exit codes, JSON, errors on stderr."""

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

from tests import live_platform
from tests.e2e.conftest import OTHER_TENANT_KEY

CORRAL = shutil.which("corral", path=str(Path(sys.executable).parent)) or shutil.which("corral")


@pytest.fixture(scope="module")
def cli(platform, tmp_path_factory):
    assert CORRAL, "the corral console script is not installed: pip install -e clients/python"
    config = tmp_path_factory.mktemp("cli") / "config.toml"
    base = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}

    def run(*args: str, key: str | None = platform["api_key"], input: str | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        environ = {**base, "CORRAL_URL": platform["api"], "CORRAL_CONFIG": str(config), "COLUMNS": "200", **(env or {})}
        if key is not None:
            environ["CORRAL_API_KEY"] = key
        return subprocess.run([CORRAL, *args], env=environ, input=input, capture_output=True, text=True, timeout=120)

    run.config = config
    run.base = base
    return run


def ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, (result.returncode, result.stdout[-2000:], result.stderr[-2000:])
    return result


def as_json(result: subprocess.CompletedProcess):
    return json.loads(ok(result).stdout)


@pytest.fixture(scope="module")
def sandbox_id(cli):
    created = as_json(cli("sandbox", "create", "busybox", "--memory-mb", "64", "--label", "suite=cli", "--json"))
    assert created["state"] == "running"
    yield created["id"]
    cli("sandbox", "rm", created["id"])


def test_create_ls_get_and_exec_exit_codes_and_output(cli, sandbox_id):
    listed = as_json(cli("sandbox", "ls", "--label", "suite=cli", "--json"))
    assert [sb["id"] for sb in listed] == [sandbox_id]
    human = ok(cli("sandbox", "ls", "--label", "suite=cli"))
    assert sandbox_id in human.stdout and "running" in human.stdout
    got = as_json(cli("--json", "sandbox", "get", sandbox_id))
    assert got["labels"] == {"suite": "cli"}
    # A running sandbox's usage is read on its node (docs/cli.md): its cpu and its disk so far.
    assert got["usage"]["wall_time_s"] > 0 and got["usage"]["disk_used_bytes"] > 0, got["usage"]
    assert "usage" in ok(cli("sandbox", "get", sandbox_id)).stdout

    streamed = cli("sandbox", "exec", sandbox_id, "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    assert (streamed.returncode, streamed.stdout, streamed.stderr) == (3, "out\n", "err\n")
    result = cli("sandbox", "exec", sandbox_id, "--json", "--", "sh", "-c", "echo hi --json; exit 4")
    assert result.returncode == 4  # the command's code, with the result document on stdout
    document = json.loads(result.stdout)
    assert (document["exit_code"], document["stdout"]) == (4, "hi --json\n")
    piped = ok(cli("sandbox", "exec", "--stdin", sandbox_id, "--", "wc", "-c", input="12345"))
    assert piped.stdout.strip() == "5"


def test_cp_round_trip_both_directions(cli, sandbox_id, tmp_path):
    payload = bytes(range(256)) * 300
    local = tmp_path / "blob.bin"
    local.write_bytes(payload)
    up = as_json(cli("sandbox", "cp", str(local), f"{sandbox_id}:/tmp/blob.bin", "--json"))
    assert up == {"sandbox_id": sandbox_id, "path": "/tmp/blob.bin", "bytes": len(payload), "direction": "upload"}
    size = ok(cli("sandbox", "exec", sandbox_id, "--", "wc", "-c", "/tmp/blob.bin"))
    assert size.stdout.split()[0] == str(len(payload))
    back = tmp_path / "back"
    back.mkdir()
    ok(cli("sandbox", "cp", f"{sandbox_id}:/tmp/blob.bin", str(back)))
    assert (back / "blob.bin").read_bytes() == payload
    missing = cli("sandbox", "cp", f"{sandbox_id}:/tmp/nope", str(back / "x"))
    assert missing.returncode == 1 and "Traceback" not in missing.stderr and not (back / "x").exists()


def test_pause_resume_and_a_missing_sandbox(cli, sandbox_id):
    assert as_json(cli("sandbox", "pause", sandbox_id, "--json"))["state"] == "paused"
    frozen = cli("sandbox", "exec", sandbox_id, "--", "true")
    assert frozen.returncode == 1 and "409" in frozen.stderr
    assert as_json(cli("sandbox", "resume", sandbox_id, "--json"))["state"] == "running"
    missing = cli("--json", "sandbox", "get", "sb-does-not-exist")
    assert missing.returncode == 1 and missing.stdout == ""
    assert json.loads(missing.stderr)["error"]["status"] == 404


def test_exec_it_is_an_interactive_shell_in_a_pty(cli, platform, sandbox_id):
    environ = {**cli.base, "CORRAL_URL": platform["api"], "CORRAL_API_KEY": platform["api_key"],
               "CORRAL_CONFIG": str(cli.config)}
    child = pexpect.spawn(CORRAL, ["sandbox", "exec", "-it", sandbox_id], env=environ, encoding="utf-8", timeout=60)
    try:
        child.expect_exact(f"{sandbox_id}:")
        child.expect_exact("$ ")
        child.sendline("mkdir -p /tmp/work && cd /tmp/work && echo $((6 * 7))")
        child.expect_exact("42")
        child.expect_exact(f"{sandbox_id}:/tmp/work$ ")  # the next prompt: cd carried over
        child.sendline("pwd; ls /nonexistent")
        child.expect_exact("/tmp/work")
        child.expect("No such file")
        child.expect_exact(f"{sandbox_id}:/tmp/work$ ")
        child.sendline("exit 7")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 7


def test_job_create_shows_progress_per_state_then_wait_and_ls(cli):
    spec = ["--memory-mb", "32", "--cpu", "0.1", "--timeout-s", "2"]
    followed = ok(cli("job", "create", "busybox", "--count", "3", *spec))
    assert "terminated" in followed.stderr and "3/3" in followed.stderr  # the bars, on stderr
    assert "terminated=3" in followed.stdout
    queued = as_json(cli("job", "create", "busybox", "-n", "2", "--no-wait", *spec, "--json"))
    waited = as_json(cli("job", "wait", queued["id"], "--json"))
    assert waited["counts"] == {"terminated": 2}
    mine = [job["id"] for job in as_json(cli("job", "ls", "--json"))]
    assert queued["id"] in mine
    theirs = [job["id"] for job in as_json(cli("job", "ls", "--json", key=OTHER_TENANT_KEY))]
    assert queued["id"] not in theirs  # tenant-scoped
    assert as_json(cli("job", "rm", queued["id"], "--json"))["deleted"] is True


def test_fncall_run_judges_a_file(cli, platform, tmp_path):
    live_platform.fncall_ready(platform)
    source = tmp_path / "double.py"
    source.write_text("print(int(input()) * 2)\n")
    accepted = as_json(cli("fncall", "run", str(source), "--runtime", "python", "--case", "21=>42\\n", "--json"))
    assert accepted["verdict"] == "accepted"
    wrong = cli("fncall", "run", str(source), "--runtime", "python", "--case", "2=>5\\n")
    assert wrong.returncode == 5 and "wrong_answer" in wrong.stdout


def test_nodes_rollouts_images_and_envs_list(cli, corral):
    nodes = as_json(cli("nodes", "--json"))
    assert nodes and all(n["cpu"] > 0 and n["memory_mb"] > 0 for n in nodes)
    assert "%" in ok(cli("nodes")).stdout  # capacity bars
    rollout = corral.rollouts.create("busybox", job_id="cli-e2e", memory_mb=32)
    rollout.exec("echo step-zero")
    rollout.finish(reward=1.0)
    shown = as_json(cli("rollout", "show", rollout.id, "--json"))
    assert [s["action"] for s in shown["steps"]] == ["exec"] and shown["reward"] == 1.0
    table = ok(cli("rollout", "show", rollout.id)).stdout
    assert "exec" in table and "step-zero" in table
    assert rollout.id in [r["id"] for r in as_json(cli("rollout", "ls", "--job", "cli-e2e", "--json"))]
    assert "busybox" in [e["name"] for e in as_json(cli("env", "ls", "--json"))]
    assert isinstance(as_json(cli("images", "ls", "--json")), list)


def test_a_bad_api_key_is_exit_1_with_the_apis_message(cli):
    human = cli("sandbox", "ls", key="not-a-key")
    assert human.returncode == 1 and human.stdout == ""
    assert "invalid API key" in human.stderr and "Traceback" not in human.stderr
    scripted = cli("--json", "sandbox", "ls", key="not-a-key")
    assert scripted.returncode == 1 and scripted.stdout == ""
    assert json.loads(scripted.stderr)["error"]["status"] == 401
    usage = cli("sandbox", "create", "--label", "no-equals-sign")
    assert usage.returncode == 2 and "KEY=VALUE" in usage.stderr and "Traceback" not in usage.stderr


def test_login_writes_a_0600_profile_the_next_commands_use(cli, platform, tmp_path):
    config = tmp_path / "corral" / "config.toml"
    env = {"CORRAL_CONFIG": str(config), "CORRAL_URL": ""}
    refused = cli("login", "--url", platform["api"], "--api-key", "not-a-key", key=None, env=env)
    assert refused.returncode == 1 and not config.exists()
    ok(cli("login", "--url", platform["api"], "--api-key", platform["api_key"], "--profile", "e2e", key=None, env=env))
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert platform["api_key"] in config.read_text()
    assert isinstance(as_json(cli("sandbox", "ls", "--json", key=None, env=env)), list)  # url + key from the file
    shown = as_json(cli("config", "show", "--json", key=None, env=env))
    assert shown["profile"] == "e2e" and shown["source"]["api_key"] == "profile e2e"
    assert platform["api_key"] not in json.dumps(shown)  # masked


def test_issue_34_exec_timeout_piped_ids_and_job_wait(cli, sandbox_id):
    """A command that runs out of --timeout exits 124 with what it printed and no traceback (it
    crashed on the exit event); a piped table prints whole ids (80 columns cut them, with no
    COLUMNS to say otherwise); a job followed with stderr not a terminal ends without the bars
    of states it left (a stray `starting 0/2`)."""
    timed_out = cli("sandbox", "exec", "--timeout", "1", sandbox_id, "--", "sh", "-c", "echo started; sleep 5")
    assert (timed_out.returncode, timed_out.stdout) == (124, "started\n")
    assert "Traceback" not in timed_out.stderr and "KeyError" not in timed_out.stderr

    piped = ok(cli("sandbox", "ls", "--label", "suite=cli", env={"COLUMNS": ""}))
    assert [line for line in piped.stdout.splitlines() if sandbox_id in line]
    assert "…" not in piped.stdout

    job = cli("job", "create", "busybox", "--count", "2", "--memory-mb", "16", "--timeout-s", "1")
    assert job.returncode == 0, job.stderr
    bars = [line.split()[0] for line in job.stderr.splitlines() if "/2" in line]
    assert bars and set(bars) <= {"terminated", "expired", "failed"}, job.stderr


def test_issue_34_fncall_cases_compare_as_a_judge(cli, platform, tmp_path):
    """`--case '1 2=>3'` accepts a correct program (it printed `3\\n`: an exact compare with `3`
    said wrong_answer); a wrong one exits 5 showing what was expected and what came out."""
    live_platform.fncall_ready(platform)
    add = tmp_path / "add.py"
    add.write_text("a, b = map(int, input().split())\nprint(a + b)\n")
    accepted = cli("fncall", "run", str(add), "--runtime", "python", "--case", "1 2=>3", "--case", "20 22=>42")
    assert accepted.returncode == 0, (accepted.stdout, accepted.stderr)
    assert "accepted" in accepted.stdout
    off_by_one = tmp_path / "wrong.py"
    off_by_one.write_text("a, b = map(int, input().split())\nprint(a + b + 1)\n")
    wrong = cli("fncall", "run", str(off_by_one), "--runtime", "python", "--case", "1 2=>3")
    assert wrong.returncode == 5 and "wrong_answer" in wrong.stdout
    assert 'expected: "3"' in wrong.stdout and 'got:      "4\\n"' in wrong.stdout
