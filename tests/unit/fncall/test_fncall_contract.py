"""The fncall wire contract (corral_common.contracts.fncall) and the settings both sides read:
round trips, the exact bytes on the wire, compare parsing, the wall-clock limit."""

import json

import pytest

from corral_api.compat.sandboxfusion import service as sf
from corral_api.compat.sandboxfusion.schemas import RunCodeRequest
from corral_api.fncall.schemas import FncallRequest
from corral_api.fncall.service import FncallService
from corral_api.fncall.settings import FncallApiSettings
from corral_api.settings import ApiSettings
from corral_common.contracts.fncall import (
    COMPILED,
    RUNTIMES,
    CaseResult,
    CompileResult,
    FncallJob,
    FncallResult,
    JobBundle,
    JobCase,
    ResultBundle,
    Verdict,
    parse_compare,
    queue_name,
    wall_limit_ms,
)
from corral_node_agent.fncall.runtimes import RUNTIME_SPECS
from corral_node_agent.fncall.settings import FncallNodeSettings
from corral_node_agent.settings import NodeAgentSettings


def _result() -> FncallResult:
    return FncallResult(call_id="c", runtime="cpp", verdict=Verdict.wrong_answer,
                        compile=CompileResult(verdict=Verdict.accepted, time_ms=1.5),
                        cases=[CaseResult(verdict=Verdict.accepted, stdout="1\n", exit_code=0),
                               CaseResult(verdict=Verdict.wrong_answer, signal=9)],
                        node_id="n", worker="w", files={"a": "eA=="}, message="m")


@pytest.mark.parametrize("mode,parsed", [("exact", ("exact", 0.0)), ("tokens", ("tokens", 0.0)),
                                         ("float:1e-6", ("float", 1e-6)), ("float:0", ("float", 0.0)),
                                         ("float:0.5", ("float", 0.5))])
def test_compare_modes_parse(mode, parsed):
    assert parse_compare(mode) == parsed


@pytest.mark.parametrize("mode", ["", "Exact", "float", "float:", "float:-1", "float:abc", "float:inf", "float:nan",
                                  "float:1e400", "lines"])
def test_bad_compare_modes_raise_the_public_message(mode):
    with pytest.raises(ValueError, match=r"^must be exact, tokens or float:<eps> such as float:1e-6$"):
        parse_compare(mode)


def test_wall_limit_is_twice_the_cpu_limit_plus_half_a_second_unless_set():
    assert wall_limit_ms(2000) == 4500 and wall_limit_ms(1) == 502
    assert wall_limit_ms(2000, 3000) == 3000
    assert FncallJob(call_id="x", runtime="python", code="", time_limit_ms=1000).case_wall_ms() == 2500
    assert FncallJob(call_id="x", runtime="python", code="", wall_limit_ms=700).case_wall_ms() == 700


def test_longest_run_counts_the_compile_only_for_compiled_runtimes():
    cases = [JobCase()] * 3
    assert FncallJob(call_id="x", runtime="cpp", code="", cases=cases, time_limit_ms=1000,
                     compile_timeout_ms=10_000).longest_run_s() == pytest.approx(10 + 3 * 2.5)
    assert FncallJob(call_id="x", runtime="bash", code="", cases=cases, time_limit_ms=1000).longest_run_s() == 7.5


def test_runtimes_are_the_contracts_on_both_sides():
    assert tuple(RUNTIME_SPECS) == RUNTIMES and set(COMPILED) <= set(RUNTIMES)
    assert {name for name, spec in RUNTIME_SPECS.items() if spec.compile} == set(COMPILED)
    assert FncallNodeSettings().runtime_names == list(RUNTIMES)
    assert queue_name("python") == "fncall.python"


def test_job_and_result_round_trip():
    job = FncallJob(call_id="c1", runtime="cpp", code="int main(){}", files={"a/b.txt": "aGk="},
                    cases=[JobCase(stdin="1", expected_stdout="1\n"), JobCase(stdin="2")], compare="tokens",
                    wall_limit_ms=900, fetch_files=["out.txt"])
    assert FncallJob.model_validate_json(job.body()) == job
    assert JobBundle.model_validate_json(JobBundle(jobs=[job, job]).body()).jobs == [job, job]
    result = _result()
    assert FncallResult.model_validate_json(result.body()) == result
    assert ResultBundle.model_validate_json(ResultBundle(results=[result]).body()).results == [result]


def test_a_job_sends_only_what_was_set_and_the_node_fills_the_defaults():
    job = FncallJob.model_validate_json(FncallJob(call_id="c", runtime="python", code="x").body())
    assert job.to_wire() == {"call_id": "c", "runtime": "python", "code": "x"}
    assert (job.cases, job.time_limit_ms, job.compare, job.wall_limit_ms) == ([JobCase()], 2000, "exact", None)


# The bytes on the wire as they were before the contract existed (a node of either version
# must read what the other sends).
CPP_CALL = (
    '{"call_id": "c2", "runtime": "cpp", "code": "int main(){}", "files": {"data/in.txt": "aGk="}, "cases": '
    '[{"stdin": "1", "expected_stdout": "1\\n"}, {"stdin": "2", "expected_stdout": null}], "time_limit_ms": 100, '
    '"memory_limit_mb": 256, "output_limit_kb": 1024, "compare": "float:1e-6", "compile_timeout_ms": 10000, '
    '"stop_on_failure": true}')
SANDBOXFUSION_CALL = (
    '{"call_id": "c3", "runtime": "python", "code": "print(1)", "files": {"a.txt": "aGk="}, "cases": [{"stdin": "x"}], '
    '"time_limit_ms": 3000, "memory_limit_mb": 1024, "output_limit_kb": 8192, "compare": "exact", '
    '"compile_timeout_ms": 7000, "stop_on_failure": false, "wall_limit_ms": 3000, "fetch_files": ["out.txt"]}')
RESULT = (
    '{"call_id":"c","runtime":"cpp","verdict":"wrong_answer","compile":{"verdict":"accepted","exit_code":null,'
    '"stdout":"","stderr":"","time_ms":1.5,"wall_ms":0.0},"cases":[{"verdict":"accepted","exit_code":0,"signal":null,'
    '"stdout":"1\\n","stderr":"","time_ms":0.0,"wall_ms":0.0,"memory_kb":0},{"verdict":"wrong_answer","exit_code":null,'
    '"signal":9,"stdout":"","stderr":"","time_ms":0.0,"wall_ms":0.0,"memory_kb":0}],"node_id":"n","worker":"w",'
    '"files":{"a":"eA=="},"message":"m"}')


def test_the_api_sends_the_same_bytes_as_before():
    service = FncallService(rpc=None, redis=None, settings=FncallApiSettings())
    cpp = service.build_job(FncallRequest(runtime="cpp", code="int main(){}", files={"data/in.txt": "aGk="},
                                          tests=[{"stdin": "1", "expected_stdout": "1\n"}, {"stdin": "2"}],
                                          compare="float:1e-6", stop_on_failure=True, time_limit_ms=100))
    assert cpp.model_copy(update={"call_id": "c2"}).body().decode() == CPP_CALL
    call, extra = sf.to_fncall(RunCodeRequest(code="print(1)", language="python", run_timeout=3, compile_timeout=7,
                                                 stdin="x", files={"/work/a.txt": "aGk="}, fetch_files=["out.txt"]))
    fusion = service.build_job(call, **extra)
    assert fusion.model_copy(update={"call_id": "c3"}).body().decode() == SANDBOXFUSION_CALL
    bundle = JobBundle(jobs=[cpp.model_copy(update={"call_id": "c2"})]).body().decode()
    assert bundle == '{"jobs": [' + CPP_CALL + "]}"


def test_the_node_sends_the_same_bytes_as_before():
    assert _result().body().decode() == RESULT
    assert ResultBundle(results=[_result()]).body() == json.dumps({"results": [json.loads(RESULT)]}).encode()


def test_fncall_settings_keep_their_env_names_nested_in_each_services_settings(monkeypatch):
    monkeypatch.setenv("CORRAL_FNCALL_BATCH_BUNDLE", "3")
    monkeypatch.setenv("CORRAL_FNCALL_MAX_WAIT_S", "12.5")
    monkeypatch.setenv("CORRAL_FNCALL_POOL_MAX", "5")
    monkeypatch.setenv("CORRAL_FNCALL_WARM_PYTHON", "false")
    monkeypatch.setenv("CORRAL_FNCALL_RUNTIMES", "python,c")
    api = ApiSettings()
    assert (api.fncall.batch_bundle, api.fncall.max_wait_s) == (3, 12.5)
    node = NodeAgentSettings()
    assert (node.fncall.pool_max, node.fncall.warm_python, node.fncall.runtime_names) == (5, False, ["python", "c"])
    given = FncallApiSettings(batch_bundle=1)
    assert ApiSettings(fncall=given).fncall is given


def test_no_fncall_setting_means_two_things():
    """Both services read CORRAL_FNCALL_*: a field declared by both would configure both at once."""
    assert not set(FncallApiSettings.model_fields) & set(FncallNodeSettings.model_fields)
