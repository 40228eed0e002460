"""corral.integrations driven by the frameworks themselves, from PyPI at pinned versions, each in
its own venv (their dependency trees would change the platform's): one small task each that
writes a file in a Corral sandbox and checks it.

The venvs are built once per machine under CORRAL_TEST_VENV_DIR (default /var/cache/corral/venvs;
CI has PyPI); the SDK is installed into them from this checkout at every session (its
``inspect_ai`` entry point needs the installed package's metadata).
"""

import json
import os
import shutil
import subprocess
import tempfile
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV_DIR = Path(os.environ.get("CORRAL_TEST_VENV_DIR", "/var/cache/corral/venvs"))
FRAMEWORKS = {  # venv name -> (python, pinned requirement)
    "mini-swe-agent-2.4.6": ("3.11", "mini-swe-agent==2.4.6"),
    "inspect-ai-0.3.285": ("3.11", "inspect-ai==0.3.285"),
}
# harbor 0.26.0 (every release) needs Python >= 3.12; the project and its CI run 3.11.
HARBOR_SKIP = "harbor (all releases) requires Python >= 3.12; Corral's runtime and CI are Python 3.11"


def framework_python(name: str) -> Path:
    python_version, requirement = FRAMEWORKS[name]
    venv = VENV_DIR / name
    python = venv / "bin" / "python"
    if not (venv / ".corral-ready").exists():
        VENV_DIR.mkdir(parents=True, exist_ok=True)
        base = f"python{python_version}"
        subprocess.run([base, "-m", "venv", str(venv)], check=True)
        out = subprocess.run([str(python), "-m", "pip", "install", "-q", requirement], capture_output=True, text=True)
        if out.returncode:
            pytest.skip(f"cannot install {requirement} here: {out.stderr[-500:]}")
        (venv / ".corral-ready").write_text(requirement)
    # The SDK from this checkout, forced in without its dependencies: a forced reinstall of
    # those too replaced the framework's own (rich, httpx...) at every call, and once left
    # inspect_ai a rich without rich.panel. A plain install first adds any it lacks.
    # From a copy of its own: setuptools builds in the source tree's build/, and two workers
    # installing at once collided there ("File exists: build/bdist.../corral-0.1.0.dist-info").
    with tempfile.TemporaryDirectory(prefix="corral-sdk-") as tmp:
        client = shutil.copytree(ROOT / "clients" / "python", Path(tmp) / "python",
                                 ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        for extra in ([], ["--force-reinstall", "--no-deps", "--no-cache-dir"]):
            out = subprocess.run([str(python), "-m", "pip", "install", "-q", *extra, str(client)],
                                 capture_output=True, text=True)
            assert out.returncode == 0, out.stderr[-2000:]
    return python


def run_in(python: Path, platform: dict, script: str, *args: str, cwd: Path | None = None,
           timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(CORRAL_URL=platform["api"], CORRAL_API_KEY=platform["api_key"], CORRAL_ENVIRONMENT="busybox",
               PATH=f"{python.parent}:{env.get('PATH', '')}")
    return subprocess.run([str(python), "-c", textwrap.dedent(script), *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=timeout)


MSWEA = """
    import json
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.environments import get_environment
    from minisweagent.models.test_models import DeterministicModel, make_output

    env = get_environment({"environment_class": "corral.integrations.mini_swe_agent.CorralEnvironment",
                           "image": "busybox", "interpreter": ["sh", "-c"], "cwd": "/tmp", "memory_mb": 64})
    sandbox_id = env.sandbox.id
    missing = env.execute({"command": "cat /tmp/nope.txt"})
    model = DeterministicModel(outputs=[
        make_output("write it", [{"command": "echo 'solved by mini-swe-agent' > answer.txt"}]),
        make_output("check it", [{"command": "grep -q solved answer.txt && echo checked"}]),
        make_output("submit", [{"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; cat answer.txt"}]),
    ])
    agent = DefaultAgent(model, env, system_template="You are a test.", instance_template="{{task}}",
                         step_limit=10, cost_limit=100)
    result = agent.run("write answer.txt")
    observations = json.dumps(agent.messages[2:])  # what the agent saw after its task
    env.cleanup()
    print(json.dumps({"sandbox_id": sandbox_id, "result": result, "missing": missing,
                      "observations": observations}))
"""


def test_mini_swe_agent_environment_class(corral, platform):
    python = framework_python("mini-swe-agent-2.4.6")
    out = run_in(python, platform, MSWEA)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["result"]["exit_status"] == "Submitted"
    assert report["result"]["submission"].strip() == "solved by mini-swe-agent"
    assert "checked" in report["observations"]
    assert report["missing"]["returncode"] != 0 and "nope.txt" in report["missing"]["output"]  # stderr merged
    assert corral.sandboxes.get(report["sandbox_id"]).wait("terminated", timeout=60).state == "terminated"


INSPECT_TASK = """
    from inspect_ai import Task, task
    from inspect_ai.dataset import Sample
    from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer
    from inspect_ai.solver import Generate, TaskState, solver
    from inspect_ai.util import sandbox


    @solver
    def write_answer():
        async def solve(state: TaskState, generate: Generate) -> TaskState:
            await sandbox().write_file("work/answer.txt", "solved by inspect\\n")
            result = await sandbox().exec(["sh", "-c", "cat work/answer.txt && echo oops >&2; exit 3"])
            state.metadata["exec"] = [result.returncode, result.stdout, result.stderr]
            try:
                await sandbox().read_file("work/missing.txt")
            except FileNotFoundError:
                state.metadata["missing"] = "FileNotFoundError"
            return state
        return solve


    @scorer(metrics=[accuracy()])
    def file_written():
        async def score(state: TaskState, target: Target) -> Score:
            text = await sandbox().read_file("work/answer.txt")
            ok = text == target.text and state.metadata["exec"] == [3, target.text, "oops\\n"] \\
                and state.metadata.get("missing") == "FileNotFoundError"
            return Score(value=CORRECT if ok else INCORRECT, explanation=repr((text, state.metadata)))
        return score


    @task
    def corral_file():
        return Task(dataset=[Sample(input="write the file", target="solved by inspect\\n")],
                    solver=write_answer(), scorer=file_written(), sandbox="{sandbox}")
"""

INSPECT_RUN = """
    import json, sys
    from inspect_ai import eval
    from inspect_ai.util._sandbox.registry import registry_find_sandboxenv
    registry_find_sandboxenv("corral")  # found through the entry point, nothing imported by hand
    logs = eval(sys.argv[1], model="mockllm/model", sandbox=(sys.argv[2] or None) if len(sys.argv) > 2 else None,
                display="none", log_dir=sys.argv[3] if len(sys.argv) > 3 else "logs")
    log = logs[0]
    sample = log.samples[0]
    print(json.dumps({"status": log.status, "score": sample.scores["file_written"].value,
                      "explanation": sample.scores["file_written"].explanation,
                      "error": str(log.error) if log.error else None}))
"""


# inspect's own command line, as a user runs it.
INSPECT_CLI = """
    import sys
    from inspect_ai._cli.main import main
    sys.argv = ["inspect", "eval", *sys.argv[1:]]
    main()
"""

INSPECT_READ_LOG = """
    import json, sys
    from inspect_ai.log import list_eval_logs, read_eval_log
    log = read_eval_log(list_eval_logs(sys.argv[1])[0])
    sample = log.samples[0]
    print(json.dumps({"status": log.status, "score": sample.scores["file_written"].value,
                      "explanation": sample.scores["file_written"].explanation,
                      "error": str(log.error) if log.error else None}))
"""


@pytest.mark.parametrize("config", ["corral", "compose", "name"])
def test_inspect_ai_sandbox_provider(corral, platform, tmp_path, config):
    python = framework_python("inspect-ai-0.3.285")
    if config == "compose":  # a compose file as inspect's docker provider takes it, mapped to an environment
        (tmp_path / "compose.yaml").write_text("services:\n  default:\n    image: docker.io/library/busybox:1.36\n"
                                               "    mem_limit: 64m\n    environment:\n      TASK: file\n")
        sandbox = ("corral", str(tmp_path / "compose.yaml"))
    else:
        sandbox = "corral"
    (tmp_path / "task.py").write_text(textwrap.dedent(INSPECT_TASK).replace('"{sandbox}"', repr(sandbox)))
    before = {s.id for s in corral.sandboxes.list(labels={"framework": "inspect_ai"})}
    if config == "name":  # `inspect eval --sandbox corral:<environment>`, as the docs give it: inspect's
        # CLI hands the name over as a path under the task's directory
        cli = run_in(python, platform, INSPECT_CLI, "task.py", "--sandbox", "corral:busybox", "--model",
                     "mockllm/model", "--log-dir", "logs", "--display", "none", cwd=tmp_path)
        assert cli.returncode == 0, cli.stderr[-3000:]
        out = run_in(python, platform, INSPECT_READ_LOG, "logs", cwd=tmp_path)
    else:
        out = run_in(python, platform, INSPECT_RUN, "task.py", "", "logs", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["status"] == "success" and report["score"] == "C", report
    made = [s for s in corral.sandboxes.list(labels={"framework": "inspect_ai"}) if s.id not in before]
    assert len(made) == 1  # one sandbox for the sample, released by sample_cleanup
    assert made[0].info.environment == "busybox"
    assert made[0].wait("terminated", timeout=60).state == "terminated"


def test_harbor_environment():
    pytest.skip(HARBOR_SKIP)
