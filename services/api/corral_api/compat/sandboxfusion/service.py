"""``/run_code`` as an fncall call: the request translated, the result mapped back with upstream's
status rules, and the whole call bounded by the time verl's client waits.

Upstream's rules (sandbox/server/sandbox_api.py ``parse_run_status``): any ``Error`` result →
``SandboxError``; else any ``TimeLimitExceeded`` or non-zero return code → ``Failed``; else
``Success``. A program that failed to compile has no ``run_result``. An unsupported language or
a call no worker could take is ``SandboxError`` with the reason in ``message``.

Overload: a call waits (in the fncall work queue, for a worker) for as long as the caller's own
timeout allows, then the answer is HTTP 504, which verl retries (429/503 score -1 there).
verl's client gives up after ``compile_timeout + run_timeout + 10 s``; we answer by
``compile_timeout + run_timeout + DEADLINE_SLACK_S``.
"""

import asyncio
import math

from corral_api.compat.sandboxfusion.schemas import (
    EXTRA_LANGUAGES,
    CommandRunResult,
    CommandRunStatus,
    RunCodeRequest,
    RunCodeResponse,
    RunStatus,
)
from corral_api.fncall.schemas import FncallRequest
from corral_api.fncall.service import FncallService
from corral_common.contracts.fncall import RUNTIMES, CaseResult, CompileResult, FncallResult, Verdict
from corral_common.web.errors import CorralError, ServiceUnavailable

# SandboxFusion's name -> the fncall runtime (same name unless listed).
ALIASES = {"python3": "python"}
LANGUAGES = {name: ALIASES.get(name, name) for name in (*RUNTIMES, *EXTRA_LANGUAGES)
             if ALIASES.get(name, name) in RUNTIMES}
DEFAULT_MEMORY_MB = 1024
MAX_MEMORY_MB = 4096
MIN_MEMORY_MB = 16  # fncall's floor: a smaller verl memory_limit_MB runs with 16
OUTPUT_LIMIT_KB = 8 * 1024
DEADLINE_SLACK_S = 8.0  # of verl's 10 s: the rest is for the network and the client


class GatewayTimeout(CorralError):
    status_code = 504
    code = "sandboxfusion_timeout"


def deadline_s(req: RunCodeRequest) -> float:
    return req.compile_timeout + req.run_timeout + DEADLINE_SLACK_S


def _ms(seconds: float) -> int:
    # Rounded up and at least 1 ms: a sub-millisecond timeout (the fuzzer sends 5e-324) is 1 ms,
    # never 0, which fncall reads as "no limit" or rejects.
    return max(1, math.ceil(seconds * 1000))


def to_fncall(req: RunCodeRequest) -> tuple[FncallRequest, dict]:
    """The fncall request plus the job fields SandboxFusion needs beyond it."""
    files = {name.removeprefix("/work/").removeprefix("./"): content
             for name, content in req.files.items() if content is not None}
    memory = (min(max(req.memory_limit_mb, MIN_MEMORY_MB), MAX_MEMORY_MB) if req.memory_limit_mb > 0
              else DEFAULT_MEMORY_MB)
    # Upstream runs an empty program (python: Success, no output; C: a link error); fncall wants
    # code, and one newline is the same program in every language.
    call = FncallRequest(runtime=LANGUAGES[req.language], code=req.code or "\n", files=files, stdin=req.stdin or "",
                         time_limit_ms=_ms(req.run_timeout), memory_limit_mb=memory,
                         output_limit_kb=OUTPUT_LIMIT_KB)
    extra = {"wall_limit_ms": _ms(req.run_timeout), "compile_timeout_ms": _ms(req.compile_timeout),
             "fetch_files": list(req.fetch_files)}
    return call, extra


def _command(result: CompileResult | CaseResult) -> CommandRunResult:
    if result.verdict == Verdict.system_error:
        status = CommandRunStatus.Error
    elif result.verdict == Verdict.time_limit_exceeded:
        status = CommandRunStatus.TimeLimitExceeded
    else:
        status = CommandRunStatus.Finished
    return_code = result.exit_code
    if status is CommandRunStatus.Finished and return_code is None and result.verdict != Verdict.accepted:
        # Killed by a signal (memory, output limit): upstream reports the shell's 128+n; never "0".
        return_code = 128 + (getattr(result, "signal", None) or 9)
    return CommandRunResult(status=status, execution_time=round(result.wall_ms / 1000, 6),
                            cpu_time=round(result.time_ms / 1000, 6), return_code=return_code,
                            stdout=result.stdout, stderr=result.stderr)


def run_status(compile_result: CommandRunResult | None, run_result: CommandRunResult | None) -> tuple[RunStatus, str]:
    """Upstream's parse_run_status."""
    outcomes = [r for r in (compile_result, run_result) if r is not None]
    for r in outcomes:
        if r.status is CommandRunStatus.Error:
            return RunStatus.SandboxError, r.stderr or ""
    if any(r.status is CommandRunStatus.TimeLimitExceeded for r in outcomes):
        return RunStatus.Failed, ""
    if any(r.return_code not in (None, 0) for r in outcomes):
        return RunStatus.Failed, ""
    return RunStatus.Success, ""


def from_fncall(result: FncallResult) -> RunCodeResponse:
    if result.verdict == Verdict.system_error and not result.cases and not result.compile:
        return RunCodeResponse(status=RunStatus.SandboxError, message=result.message,
                               executor_pod_name=result.node_id or None)
    compile_result = _command(result.compile) if result.compile else None
    run_result = _command(result.cases[0]) if result.cases else None
    status, message = run_status(compile_result, run_result)
    return RunCodeResponse(status=status, message=message, compile_result=compile_result, run_result=run_result,
                           executor_pod_name=result.node_id or None, files=result.files)


async def run_code(req: RunCodeRequest, fncall: FncallService | None) -> RunCodeResponse:
    if req.language not in LANGUAGES:
        return RunCodeResponse(status=RunStatus.SandboxError,
                               message=f"language {req.language!r} is not supported by this server; supported: "
                                       f"{', '.join(sorted(LANGUAGES))}")
    if fncall is None:  # the api is still starting
        raise GatewayTimeout("the fncall service is starting; retry", loc=["body", "language"])
    call, extra = to_fncall(req)
    job = fncall.build_job(call, **extra)
    budget = deadline_s(req)
    try:
        async with asyncio.timeout(budget):
            answer = await fncall.run_call(job, ["body", "language"], timeout_s=budget + 1)
    except TimeoutError:
        raise GatewayTimeout(f"no fncall worker finished the call within {budget:g} s (compile_timeout + "
                             f"run_timeout + {DEADLINE_SLACK_S:g} s): the {req.language} workers are busy; "
                             "retry", loc=["body", "language"]) from None
    except ServiceUnavailable as exc:
        # No node serves the language now (one restarting, say): verl retries a 504 only.
        raise GatewayTimeout(exc.message, loc=["body", "language"], code=exc.code) from None
    return from_fncall(answer.result)
