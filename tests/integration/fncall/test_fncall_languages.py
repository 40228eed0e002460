"""Every fncall language on the judge tree (bubblewrap + cgroups, as the workers run them): an
accepted program compiled once and run on several cases, and a failing one with its verdict."""

import time

import pytest

from corral_common.contracts.fncall import COMPILED, RUNTIMES, FncallJob, JobCase
from tests.fncall_programs import COMPILED_FAILS, LANGUAGES, accepted
from tests.fncall_programs import FAILING as FAILING_CODE

CASES = [JobCase(stdin="1 2\n", expected_stdout="3\n"), JobCase(stdin="40 2\n", expected_stdout="42\n")]


def test_every_runtime_has_programs():
    assert set(LANGUAGES) == set(RUNTIMES)


@pytest.mark.parametrize("language", LANGUAGES)
async def test_language_accepted_and_failing(make_worker, language):
    from corral_node_agent.fncall.runtimes import RUNTIME_SPECS

    worker = make_worker()
    missing = RUNTIME_SPECS[language].missing_tools(worker.config.rootfs)
    assert not missing, f"the judge tree lacks {missing} (rebuild: scripts/build_fncall_runtime.py)"
    cases = [JobCase()] if language == "pytest" else CASES
    started = time.monotonic()
    ok = await worker.run_job(FncallJob(call_id="ok", runtime=language, code=accepted(language), cases=cases,
                                        time_limit_ms=10_000, memory_limit_mb=1024, compile_timeout_ms=30_000))
    elapsed = time.monotonic() - started
    assert ok.verdict == "accepted", ok
    assert (ok.compile is not None) == (language in COMPILED)
    assert len(ok.cases) == len(cases)
    if language == "pytest":
        assert "1 passed" in ok.cases[0].stdout
    bad = await worker.run_job(FncallJob(call_id="bad", runtime=language, code=FAILING_CODE[language],
                                         time_limit_ms=10_000, memory_limit_mb=1024, compile_timeout_ms=30_000))
    if language in COMPILED_FAILS:
        assert bad.verdict == "compile_error" and bad.compile.exit_code != 0 and not bad.cases, bad
    else:
        assert bad.verdict == "runtime_error" and bad.cases[0].exit_code != 0, bad
    print(f"{language}: accepted in {elapsed:.2f}s")





async def test_typescript_type_errors_run_and_syntax_errors_do_not_compile(make_worker):
    worker = make_worker()
    typed = await worker.run_job(FncallJob(call_id="t", runtime="typescript", code="const n: number = 'x';\n"
                                           "console.log(n);\n", cases=[JobCase(expected_stdout="x\n")]))
    assert typed.verdict == "accepted", typed  # unchecked, as SandboxFusion runs TypeScript
    broken = await worker.run_job(FncallJob(call_id="s", runtime="typescript", code="let x = ;\n"))
    assert broken.verdict == "compile_error" and "main.ts(1," in broken.compile.stderr, broken
