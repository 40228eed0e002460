"""SandboxFusion adapter: request/response mapping and upstream's status rules (pure logic),
checked against the sandbox-fusion client's own models."""

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from corral_api.compat.sandboxfusion import service as sf
from corral_api.compat.sandboxfusion.schemas import CommandRunResult, CommandRunStatus, RunCodeRequest, RunStatus
from corral_common.contracts.fncall import FncallResult


def _result(fields: dict) -> FncallResult:
    return FncallResult.model_validate({"call_id": "c1", "runtime": "python", **fields})


def test_request_mapping_and_verl_fields():
    req = RunCodeRequest.model_validate({
        "code": "print(1)", "language": "python", "run_timeout": 3, "compile_timeout": 7, "stdin": "x",
        "files": {"/work/a.txt": "aGk=", "skip": None}, "fetch_files": ["out.txt"],
        "memory_limit_MB": 512, "expected_stdout": "ignored (ROLL)"})
    call, extra = sf.to_fncall(req)
    assert call.runtime == "python" and call.stdin == "x" and call.files == {"a.txt": "aGk="}
    assert call.memory_limit_mb == 512 and call.time_limit_ms == 3000
    assert extra == {"wall_limit_ms": 3000, "compile_timeout_ms": 7000, "fetch_files": ["out.txt"]}
    assert sf.to_fncall(RunCodeRequest(code="x"))[0].memory_limit_mb == sf.DEFAULT_MEMORY_MB  # -1: default
    assert RunCodeRequest.model_validate({"code": "x"}).language == "python"  # verl's tutorial sends code only
    # What the fuzzer found: bodies upstream accepts that fncall's own request refused (a 500).
    assert sf.to_fncall(RunCodeRequest(code=""))[0].code == "\n"
    assert sf.to_fncall(RunCodeRequest.model_validate({"code": "x", "memory_limit_MB": False}))[0].memory_limit_mb == \
        sf.DEFAULT_MEMORY_MB
    assert sf.to_fncall(RunCodeRequest.model_validate({"code": "x", "memory_limit_MB": 1}))[0].memory_limit_mb == 16
    assert sf.deadline_s(req) == 3 + 7 + sf.DEADLINE_SLACK_S
    tiny = sf.to_fncall(RunCodeRequest(code="x", run_timeout=5e-324, compile_timeout=5e-324))
    assert tiny[0].time_limit_ms == 1 and tiny[1]["wall_limit_ms"] == 1 and tiny[1]["compile_timeout_ms"] == 1


@settings(max_examples=200, deadline=None)
@given(run=st.floats(min_value=0, max_value=60, exclude_min=True), compile_=st.floats(min_value=0, max_value=300,
       exclude_min=True), memory=st.integers(min_value=-1, max_value=64 * 1024))
def test_every_request_the_schema_accepts_translates_to_a_valid_fncall(run, compile_, memory):
    """The class of bug the contract fuzzer found twice: a body /run_code's schema accepts that
    fncall's own request refuses is a 500. Every accepted timeout and memory must translate."""
    req = RunCodeRequest.model_validate({"code": "x", "run_timeout": run, "compile_timeout": compile_,
                                         "memory_limit_MB": memory})
    call, extra = sf.to_fncall(req)
    assert call.time_limit_ms >= 1 and extra["wall_limit_ms"] >= 1 and extra["compile_timeout_ms"] >= 1


def test_names_outside_upstreams_list_are_422_and_supported_list_is_long():
    with pytest.raises(ValidationError):
        RunCodeRequest.model_validate({"code": "x", "language": "brainfuck"})
    names = set(sf.LANGUAGES)
    assert {"python", "pytest", "cpp", "c", "go", "java", "nodejs", "typescript", "rust", "bash"} <= names
    assert len(names & {"ruby", "php", "lua", "perl", "kotlin_script", "scala", "csharp"}) >= 2


def test_a_language_without_toolchain_is_a_sandbox_error_with_the_list():
    response = asyncio.run(sf.run_code(RunCodeRequest(code="x", language="cuda"), fncall=None))  # type: ignore[arg-type]
    assert response.status is RunStatus.SandboxError
    assert "'cuda' is not supported" in response.message and "python" in response.message


def test_response_mapping():
    ok = sf.from_fncall(_result({"verdict": "accepted", "node_id": "n1", "files": {"o": "eA=="},
                                 "cases": [{"verdict": "accepted", "exit_code": 0, "stdout": "1\n", "stderr": "",
                                            "wall_ms": 12.0, "time_ms": 10.0}]}))
    assert ok.status is RunStatus.Success and ok.run_result.stdout == "1\n" and ok.compile_result is None
    assert ok.run_result.execution_time == pytest.approx(0.012) and ok.files == {"o": "eA=="}
    assert ok.executor_pod_name == "n1"
    ce = sf.from_fncall(_result({"verdict": "compile_error", "compile": {"verdict": "compile_error", "exit_code": 1,
                                                                         "stderr": "error"}, "cases": []}))
    assert ce.status is RunStatus.Failed and ce.run_result is None and ce.compile_result.return_code == 1
    tle = sf.from_fncall(_result({"verdict": "time_limit_exceeded",
                                  "cases": [{"verdict": "time_limit_exceeded", "exit_code": None}]}))
    assert tle.status is RunStatus.Failed and tle.run_result.status is CommandRunStatus.TimeLimitExceeded
    rte = sf.from_fncall(_result({"verdict": "runtime_error", "cases": [{"verdict": "runtime_error", "exit_code": 3}]}))
    assert rte.run_result.status is CommandRunStatus.Finished and rte.run_result.return_code == 3
    mle = sf.from_fncall(_result({"verdict": "memory_limit_exceeded",
                                  "cases": [{"verdict": "memory_limit_exceeded", "exit_code": None, "signal": 9}]}))
    assert mle.status is RunStatus.Failed and mle.run_result.return_code == 137  # never a silent Success
    err = sf.from_fncall(_result({"verdict": "system_error", "cases": [], "message": "no worker"}))
    assert err.status is RunStatus.SandboxError and err.message == "no worker"


def test_upstream_status_rules():
    def r(status, rc=0, stderr=""):
        return CommandRunResult(status=status, return_code=rc, stderr=stderr)

    F, E, T = CommandRunStatus.Finished, CommandRunStatus.Error, CommandRunStatus.TimeLimitExceeded
    assert sf.run_status(r(F), r(F)) == (RunStatus.Success, "")
    assert sf.run_status(r(E, None, "boom"), None) == (RunStatus.SandboxError, "boom")  # Error wins
    assert sf.run_status(r(F), r(E, None, "x"))[0] is RunStatus.SandboxError
    assert sf.run_status(r(T, None), r(F))[0] is RunStatus.Failed
    assert sf.run_status(r(F, 1), None)[0] is RunStatus.Failed
    assert sf.run_status(None, r(F, 2))[0] is RunStatus.Failed


def test_models_match_the_client_package():
    models = pytest.importorskip("sandbox_fusion.models")
    theirs = models.RunCodeRequest(code="print(1)", language="cpp", files={"a": "aGk="})
    ours = RunCodeRequest.model_validate(theirs.dict())
    assert ours.language == "cpp" and ours.files == {"a": "aGk="}
    ours_resp = sf.from_fncall(_result({"verdict": "accepted", "cases": [{"verdict": "accepted", "exit_code": 0}]}))
    parsed = models.RunCodeResponse(**ours_resp.model_dump(mode="json"))
    assert parsed.status == models.RunStatus.Success
    assert set(sf.RunCodeResponse.model_fields) == set(models.RunCodeResponse.__fields__)
    assert set(RunCodeRequest.model_fields) == set(models.RunCodeRequest.__fields__) | {"memory_limit_mb"}
    assert set(models.Language.__args__) <= set(RunCodeRequest.model_fields["language"].annotation.__args__)
