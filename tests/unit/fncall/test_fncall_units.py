"""fncall pieces that need no root, broker or runtime tree: judging, validation, mappings, scaling."""

import asyncio

import pytest
from pydantic import ValidationError

from corral_api.fncall.schemas import BatchRequest, FncallRequest
from corral_api.fncall.service import FncallService
from corral_api.fncall.settings import FncallApiSettings
from corral_common.contracts.fncall import parse_compare, safe_relpath
from corral_common.web.errors import BadRequest, PayloadTooLarge
from corral_node_agent.fncall.judge import outputs_match
from corral_node_agent.fncall.pool import RuntimePool


@pytest.mark.parametrize("got,want,mode,ok", [
    ("3\n", "3\n", "exact", True),
    ("3", "3\n", "exact", False),
    ("1  2\n3\n", "1 2 3", "tokens", True),
    ("1 2", "1 2 3", "tokens", False),
    ("0.3333333", "0.333333333", "float:1e-6", True),
    ("0.3334", "0.3333", "float:1e-6", False),
    ("1000000.5", "1000000.0", "float:1e-6", True),  # relative error 5e-7
    ("abc 1.0", "abc 1.0000001", "float:1e-6", True),
    ("abc 1.0", "abd 1.0", "float:1e-6", False),
    ("nan", "nan", "float:1e-6", True),
])
def test_compare_modes(got, want, mode, ok):
    assert outputs_match(got, want, mode) is ok


@pytest.mark.parametrize("mode", ["float", "float:", "float:-1", "float:abc", "lines", "float:inf"])
def test_bad_compare_modes_are_refused(mode):
    with pytest.raises(ValueError):
        parse_compare(mode)
    with pytest.raises(ValidationError):
        FncallRequest(runtime="python", code="x", compare=mode)


@pytest.mark.parametrize("field,value", [
    ("code", ""), ("time_limit_ms", 0), ("time_limit_ms", 10**9), ("memory_limit_mb", 0),
    ("memory_limit_mb", 10**6), ("output_limit_kb", 0), ("output_limit_kb", 10**9), ("tests", []),
])
def test_request_limits_are_validated(field, value):
    with pytest.raises(ValidationError):
        FncallRequest(**{"runtime": "python", "code": "print(1)", field: value})


def test_batch_size_is_bounded():
    call = {"runtime": "python", "code": "print(1)"}
    assert len(BatchRequest(calls=[call] * 10_000).calls) == 10_000
    with pytest.raises(ValidationError):
        BatchRequest(calls=[call] * 10_001)
    with pytest.raises(ValidationError):
        BatchRequest(calls=[])


def _service(**settings) -> FncallService:
    return FncallService(rpc=None, redis=None, settings=FncallApiSettings(**settings))


def test_build_job_checks_runtime_files_and_size():
    service = _service(max_call_payload_mb=1)
    job = service.build_job(FncallRequest(runtime="cpp", code="int main(){}", tests=[{"stdin": "1"}, {"stdin": "2"}],
                                          files={"data/in.txt": "aGk="}))
    assert job.runtime == "cpp" and [c.stdin for c in job.cases] == ["1", "2"]
    assert job.files == {"data/in.txt": "aGk="}
    single = service.build_job(FncallRequest(runtime="python", code="x", stdin="5"))
    assert single.to_wire()["cases"] == [{"stdin": "5"}]
    with pytest.raises(BadRequest) as exc:
        service.build_job(FncallRequest(runtime="cobol", code="DISPLAY 1"))
    assert exc.value.code == "unknown_runtime" and "python" in exc.value.message
    for name in ("/etc/passwd", "../x", "a/../../x", ""):
        with pytest.raises(BadRequest):
            service.build_job(FncallRequest(runtime="python", code="x", files={name: "aGk="}))
    with pytest.raises(BadRequest):
        service.build_job(FncallRequest(runtime="python", code="x", files={"a": "not base64!"}))
    with pytest.raises(BadRequest):
        service.build_job(FncallRequest(runtime="python", code="x", stdin="1", tests=[{"stdin": "2"}]))
    with pytest.raises(PayloadTooLarge):
        service.build_job(FncallRequest(runtime="python", code="x", stdin="x" * (2 * 1024 * 1024)))


def test_timeout_covers_compile_cases_and_queueing():
    service = _service(queue_wait_s=10, max_wait_s=1000)
    job = service.build_job(FncallRequest(runtime="cpp", code="x", tests=[{"stdin": ""}] * 3, time_limit_ms=1000))
    assert service.timeout_for(job) == pytest.approx(10 + 10 + 3 * 2.5)


def test_batches_are_bundled_and_a_bundle_waits_for_all_its_calls():
    service = _service(queue_wait_s=10, max_wait_s=1000, batch_bundle=8)
    assert [service.bundle_size(n) for n in (1, 7, 8, 24, 63, 64, 10_000)] == [1, 1, 1, 3, 7, 8, 8]
    job = service.build_job(FncallRequest(runtime="python", code="x", time_limit_ms=1000))
    assert service.bundle_timeout([job] * 4) == pytest.approx(10 + 4 * 2.5)  # as if run one after the other
    assert _service(queue_wait_s=10, max_wait_s=12).bundle_timeout([job] * 4) == 12


def test_relpath_guard():
    assert safe_relpath("a/./b.txt") == "a/b.txt"
    for bad in ("/abs", "..", "a/../../b", "a/\0b"):
        with pytest.raises(ValueError):
            safe_relpath(bad)


def test_pool_grows_only_when_saturated_with_a_backlog():
    pool = RuntimePool.__new__(RuntimePool)
    pool.max_size = 8
    assert pool.decide(2, 2, 5) == 3
    assert pool.decide(4, 4, 1) == 6
    assert pool.decide(6, 6, 100) == 8
    assert pool.decide(8, 8, 100) == 8
    assert pool.decide(4, 3, 100) == 4  # a free worker: no need
    assert pool.decide(4, 4, 0) == 4  # nothing waiting


def test_sdk_body_and_fncall_many_empty():
    from corral.fncall import fncall_body, fncall_many

    body = fncall_body("python", "print(1)", tests=[{"stdin": "1", "expected_stdout": "1\n"}], compare="tokens")
    assert body["tests"] == [{"stdin": "1", "expected_stdout": "1\n"}] and "stdin" not in body
    assert asyncio.run(fncall_many([], url="http://127.0.0.1:1", api_key="k")) == []


def test_rate_window_counts_the_last_window_only():
    from corral_common.telemetry import RateWindow

    rate = RateWindow(window_s=10.0)
    for t in (0.0, 1.0, 9.0, 11.0):
        rate.add(now=t)
    assert rate.rate(now=11.0) == 0.3  # the event at 0.0 is out of the window
