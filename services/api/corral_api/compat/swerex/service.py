"""SWE-ReX's runtime calls, translated to Corral: each JSON request is a step of the rollout
bound to the runtime's token (its X-Request-ID is the step's key, so a retried request is
answered from the log and never runs twice); sessions are shells inside the sandbox
(sessions.py); files go through the data path.

SWE-ReX errors are outcomes, not failures: the step commits ``{"swerexception": ...}`` and
every replay of that request answers the same 511. Corral errors (sandbox gone, bad input)
keep their own JSON 4xx/5xx.
"""

import hashlib
import hmac
import io
import secrets
import stat
import zipfile
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel

from corral_api.compat.swerex import sessions
from corral_api.compat.swerex.schemas import (
    BashAction,
    BashInterruptAction,
    BashObservation,
    CloseBashSessionRequest,
    CloseBashSessionResponse,
    Command,
    CommandResponse,
    CreateBashSessionRequest,
    CreateBashSessionResponse,
    ExceptionTransfer,
    IsAliveResponse,
    ReadFileRequest,
    ReadFileResponse,
    SwerexToken,
    WriteFileRequest,
)
from corral_api.dataplane.service import SandboxDataPath
from corral_api.rollouts.models import RolloutRow
from corral_api.rollouts.schemas import RolloutCreate, RolloutFinish
from corral_api.rollouts.service import ExtraAction, RolloutService
from corral_api.sandboxes.service import SandboxService
from corral_common.contracts.exec import ExecRequest, ExecResult
from corral_common.contracts.sandboxes import SandboxState
from corral_common.inputs import valid_id
from corral_common.web.errors import Conflict, CorralError, NotFound, PayloadTooLarge, Unauthorized, Unprocessable

ADAPTER = "swerex"
JOB_ID = "swerex"
# pexpect's default, which SWE-ReX's sessions inherit when an action gives no timeout.
DEFAULT_SESSION_TIMEOUT_S = 30.0
# subprocess.run without a timeout waits forever; the aiohttp client gives up after 300 s.
DEFAULT_EXECUTE_TIMEOUT_S = 3600.0
# A runtime lives as long as its sandbox: the rollout's own TTL is set to the longest allowed.
RUNTIME_TTL_S = 30 * 24 * 3600
OUTPUT_LIMIT = 4 * 1024 * 1024


class SwerexError(Exception):
    """An exception the SWE-ReX client re-raises by ``class_path`` (an HTTP 511)."""

    def __init__(self, class_path: str, message: str, extra_info: dict[str, Any] | None = None):
        super().__init__(message)
        self.transfer = ExceptionTransfer(message=message, class_path=class_path, extra_info=extra_info or {})


def _swerex(name: str, message: str, **extra_info: Any) -> SwerexError:
    return SwerexError(f"swerex.exceptions.{name}", message, extra_info)


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class SwerexService:
    def __init__(self, rollouts: RolloutService, sandboxes: SandboxService, data: SandboxDataPath, *,
                 max_upload_bytes: int):
        self.rollouts = rollouts
        self.sandboxes = sandboxes
        self.data = data
        self.max_upload_bytes = max_upload_bytes
        for name, model, perform in (
                ("create_session", CreateBashSessionRequest, self._create_session),
                ("bash", BashAction, self._bash),
                ("bash_interrupt", BashInterruptAction, self._interrupt),
                ("close_session", CloseBashSessionRequest, self._close_session),
                ("execute", Command, self._execute),
                ("read_file", ReadFileRequest, self._read_file),
                ("write_file", WriteFileRequest, self._write_file)):
            rollouts.register_action(f"{ADAPTER}.{name}", ExtraAction(model, _logged(model, perform)))

    # ---- tokens -----------------------------------------------------------------------

    async def issue(self, tenant: str, sandbox_id: str, base_url: str) -> SwerexToken:
        """A new runtime for the sandbox: a rollout that logs its requests, and its token."""
        try:
            valid_id(sandbox_id)
        except ValueError:
            # Not an id this platform issues, so no such sandbox (as every other sandbox route answers).
            raise NotFound(f"sandbox {sandbox_id} not found", loc=["path", "sandbox_id"]) from None
        secret = secrets.token_urlsafe(32)
        rollout = await self.rollouts.create(tenant, RolloutCreate(
            job_id=JOB_ID, sandbox_id=sandbox_id, idle_pause_s=0, ttl_s=RUNTIME_TTL_S,
            metadata={"adapter": ADAPTER, "token_sha256": _digest(secret)}), wait=False, timeout_s=1)
        return SwerexToken(url=f"{base_url.rstrip('/')}/v1/sandboxes/{sandbox_id}/swerex",
                           token=f"{rollout.id}.{secret}", rollout_id=rollout.id)

    async def authenticate(self, sandbox_id: str, token: str | None) -> RolloutRow:
        """The runtime's rollout, if ``token`` was issued for this sandbox; 401 otherwise."""
        if not token:
            raise Unauthorized("missing X-API-Key (the token from POST /v1/sandboxes/{id}/swerex-token)",
                               loc=["header", "x-api-key"])
        rollout_id, _, secret = token.partition(".")
        row = await self.rollouts._db(self.rollouts.repo.get, rollout_id) if secret and len(token) < 256 else None
        expected = (row.meta or {}).get("token_sha256", "") if row is not None else ""
        if (row is None or row.meta.get("adapter") != ADAPTER or row.sandbox_id != sandbox_id
                or not hmac.compare_digest(expected, _digest(secret))):
            raise Unauthorized("invalid X-API-Key for this sandbox's runtime", loc=["header", "x-api-key"])
        return row

    # ---- requests -----------------------------------------------------------------------

    async def call(self, row: RolloutRow, name: str, body: BaseModel, request_id: str) -> dict[str, Any]:
        """Run (or replay) one logged request; its response, or SwerexError / CorralError."""
        action = f"{ADAPTER}.{name}"
        try:
            step = await self.rollouts.keyed_step(row.tenant, row.id, request_id, action, body.model_dump(mode="json"))
        except Conflict as exc:
            if exc.code != "step_mismatch":
                raise
            raise Conflict(f"X-Request-ID {request_id!r} was already used for a different request "
                           f"({exc.extra.get('committed', {}).get('action', '?')}); a retry must resend the "
                           "same body", loc=["header", "x-request-id"], code="request_id_reused") from None
        if step.status == "failed" and step.error is not None:
            raise CorralError(step.error.message, code=step.error.code, status_code=step.error.status)
        if step.status == "interrupted" or step.observation is None:
            raise Conflict(f"request {request_id!r} was executing when the api stopped; whether it took effect "
                           "is unknown", loc=["header", "x-request-id"], code="step_interrupted")
        if "swerexception" in step.observation:
            transfer = ExceptionTransfer.model_validate(step.observation["swerexception"])
            error = SwerexError(transfer.class_path, transfer.message, transfer.extra_info)
            raise error
        return step.observation["response"]

    async def is_alive(self, row: RolloutRow) -> IsAliveResponse:
        try:
            record = await self.sandboxes.get(row.tenant, row.sandbox_id)
        except NotFound:
            return IsAliveResponse(is_alive=False, message=f"sandbox {row.sandbox_id} not found")
        if record.state is SandboxState.running:
            return IsAliveResponse(is_alive=True)
        return IsAliveResponse(is_alive=False, message=f"sandbox {row.sandbox_id} is {record.state.value}")

    async def close(self, row: RolloutRow) -> None:
        """RemoteDeployment.stop(): finish the runtime's rollout and release the sandbox."""
        await self.rollouts.finish(row.tenant, row.id, RolloutFinish(info={"closed_by": ADAPTER}, keep_sandbox=False))

    async def upload(self, row: RolloutRow, chunks: AsyncIterator[bytes], target_path: str, unzip: bool) -> None:
        """A file to ``target_path`` (streamed), or a zip (a directory, zipped by the client)
        extracted into it: a zip's index is at its end, so it is read into memory first (at most
        max_upload_bytes, the body limit)."""
        if not unzip:
            await self.data.write_file(row.tenant, row.sandbox_id, target_path, chunks)
            return
        data = bytearray()
        async for chunk in chunks:
            data += chunk
            if len(data) > self.max_upload_bytes:
                raise PayloadTooLarge(f"upload exceeds {self.max_upload_bytes} bytes", loc=["body", "file"])
        try:
            archive = zipfile.ZipFile(io.BytesIO(data))
            members = [m for m in archive.infolist() if not m.is_dir()]
        except zipfile.BadZipFile as exc:
            raise Unprocessable(f"unzip=true but file is not a zip archive: {exc}", loc=["body", "file"]) from None
        if sum(m.file_size for m in members) > self.max_upload_bytes:  # a zip bomb is refused unread
            raise PayloadTooLarge(f"the archive unpacks to more than {self.max_upload_bytes} bytes",
                                  loc=["body", "file"])
        for member in members:
            parts = member.filename.replace("\\", "/").split("/")
            if member.filename.startswith("/") or ".." in parts:
                raise Unprocessable(f"archive member {member.filename!r} points outside target_path",
                                    loc=["body", "file"])
            mode = (member.external_attr >> 16) & 0o777
            await self.data.write_file(row.tenant, row.sandbox_id, f"{target_path.rstrip('/')}/{member.filename}",
                                       archive.read(member), mode=mode if stat.S_IMODE(mode) else 0o644)

    # ---- the logged actions (run in the rollout's step task) -----------------------------

    async def _driver(self, row: RolloutRow, op: str, session: str, timeout_s: float, stdin: str = "",
                      expect: list[str] | None = None) -> ExecResult:
        req = sessions.driver_exec(op, session, secrets.token_hex(8), timeout_s=timeout_s,
                                   output_limit=OUTPUT_LIMIT, stdin=stdin, expect=expect)
        result = await self.data.exec(row.tenant, row.sandbox_id, req)
        if result.exit_code == sessions.NO_SESSION:
            raise _swerex("SessionDoesNotExistError", f"session {session!r} does not exist")
        if result.exit_code in (None, sessions.DRIVER_FAILED) or result.exit_code > sessions.TIMED_OUT:
            raise SwerexError("swerex.exceptions.SwerexException",
                              f"the session driver failed in the sandbox (exit {result.exit_code}): "
                              f"{result.stderr.strip()[-2000:]}")
        return result

    async def _create_session(self, row: RolloutRow, req: CreateBashSessionRequest) -> CreateBashSessionResponse:
        startup = "\n".join(f". {path}" for path in req.startup_source)
        # At least 10 s: startup_timeout (1 s by default) was meant for pexpect's local spawn.
        result = await self._driver(row, "create", req.session, max(req.startup_timeout, 10.0), stdin=startup)
        if result.exit_code == sessions.SESSION_EXISTS:
            raise _swerex("SessionExistsError", f"session {req.session} already exists")
        if result.exit_code == sessions.TIMED_OUT:
            raise _swerex("CommandTimeoutError", f"timeout after {req.startup_timeout} seconds while starting "
                                                 f"session {req.session!r}")
        return CreateBashSessionResponse(output=sessions.strip_control_chars(result.stdout))

    async def _bash(self, row: RolloutRow, action: BashAction) -> BashObservation:
        timeout = action.timeout or DEFAULT_SESSION_TIMEOUT_S
        if action.is_interactive_command or action.is_interactive_quit:
            result = await self._driver(row, "input", action.session, timeout, stdin=action.command + "\n",
                                        expect=action.expect)
            if result.exit_code == sessions.TIMED_OUT:
                raise _swerex("CommandTimeoutError",
                              f"timeout after {action.timeout} seconds while running command {action.command!r}")
            output = sessions.strip_control_chars(result.stdout).lstrip().removeprefix(action.command).strip()
            return BashObservation(output=output, exit_code=0, expect_string=result.stderr)
        result = await self._driver(row, "run", action.session, timeout, stdin=action.command)
        if result.exit_code == sessions.BAD_SYNTAX:
            msg = (f"Error (exit code 2) while checking bash command \n{action.command!r}\n"
                   f"---- Stderr ----\n{result.stderr}\n---- Stdout ----\n")
            raise _swerex("BashIncorrectSyntaxError", msg, bash_stdout="", bash_stderr=result.stderr)
        if result.exit_code == sessions.TIMED_OUT:
            raise _swerex("CommandTimeoutError",
                          f"timeout after {action.timeout} seconds while running command {action.command!r}")
        output = sessions.strip_control_chars(result.stdout)
        exit_code = None if action.check == "ignore" else sessions.exit_code_of(result)
        if action.check == "raise" and exit_code is None:
            raise _swerex("NoExitCodeError", f"failed to get the exit code of {action.command!r}")
        if action.check == "raise" and exit_code != 0:
            msg = f"Command {action.command!r} failed with exit code {exit_code}. Here is the output:\n{output!r}"
            raise _swerex("NonZeroExitCodeError", f"{action.error_msg}: {msg}" if action.error_msg else msg)
        return BashObservation(output=output, exit_code=exit_code)

    async def _interrupt(self, row: RolloutRow, action: BashInterruptAction) -> BashObservation:
        # SIGINT to the shell's process group (Ctrl-C) up to n_retry times, then SIGKILL to
        # everything in it but the shell (SWE-ReX's fallback: Ctrl-Z and kill -9 %1).
        for op in ["interrupt"] * action.n_retry + ["kill"]:
            result = await self._driver(row, op, action.session, action.timeout)
            if result.exit_code == 0:
                return BashObservation(output=sessions.strip_control_chars(result.stdout).strip(), exit_code=0)
        raise SwerexError("pexpect.exceptions.TIMEOUT", "Failed to interrupt session")

    async def _close_session(self, row: RolloutRow, req: CloseBashSessionRequest) -> CloseBashSessionResponse:
        await self._driver(row, "close", req.session, 5.0)
        return CloseBashSessionResponse()

    async def _execute(self, row: RolloutRow, command: Command) -> CommandResponse:
        argv = [command.command] if isinstance(command.command, str) else list(command.command)
        if command.shell:  # subprocess.run(shell=True): the first item is the script, the rest its $0...
            argv = ["/bin/sh", "-c", *argv]
        if command.merge_output_streams:
            argv = ["/bin/sh", "-c", 'exec "$@" 2>&1', "sh", *argv]
        try:
            req = ExecRequest(cmd=argv, cwd=command.cwd, env=command.env or {},
                              timeout_s=command.timeout or DEFAULT_EXECUTE_TIMEOUT_S, output_limit=OUTPUT_LIMIT,
                              user="root")
        except ValueError as exc:
            raise Unprocessable(f"command: {exc}", loc=["body", "command"]) from None
        result = await self.data.exec(row.tenant, row.sandbox_id, req)
        if result.timed_out:
            raise _swerex("CommandTimeoutError", f"Timeout ({command.timeout}s) exceeded while running command")
        response = CommandResponse(stdout=result.stdout, stderr=result.stderr, exit_code=result.exit_code)
        if command.check and result.exit_code != 0:
            msg = (f"Command {command.command!r} failed with exit code {result.exit_code}. "
                   f"Stdout:\n{response.stdout!r}\nStderr:\n{response.stderr!r}")
            raise _swerex("NonZeroExitCodeError", f"{command.error_msg}: {msg}" if command.error_msg else msg)
        return response

    async def _read_file(self, row: RolloutRow, req: ReadFileRequest) -> ReadFileResponse:
        try:
            chunks = await self.data.open_file(row.tenant, row.sandbox_id, req.path)
        except CorralError as exc:
            if exc.status_code == 404:
                raise SwerexError("builtins.FileNotFoundError",
                                  f"[Errno 2] No such file or directory: {req.path!r}") from None
            raise
        data = bytearray()
        try:
            async for chunk in chunks:
                data += chunk
                if len(data) > self.max_upload_bytes:
                    raise PayloadTooLarge(f"{req.path} is larger than {self.max_upload_bytes} bytes",
                                          loc=["body", "path"])
        finally:
            await chunks.aclose()  # type: ignore[attr-defined]
        try:
            return ReadFileResponse(content=bytes(data).decode(req.encoding or "utf-8", req.errors or "strict"))
        except LookupError as exc:
            raise SwerexError("builtins.LookupError", str(exc)) from None
        except UnicodeDecodeError as exc:
            raise SwerexError("builtins.UnicodeDecodeError", str(exc)) from None

    async def _write_file(self, row: RolloutRow, req: WriteFileRequest) -> dict[str, Any]:
        content = req.content.encode()
        if len(content) > self.max_upload_bytes:
            raise PayloadTooLarge(f"content exceeds {self.max_upload_bytes} bytes", loc=["body", "content"])
        await self.data.write_file(row.tenant, row.sandbox_id, req.path, content)
        return {}


def _logged(model: type[BaseModel], perform) -> Any:
    """The step performer for a rollout: validated args in, ``{"response": ...}`` or
    ``{"swerexception": ...}`` out (both are committed, and replayed alike)."""

    async def run(row: RolloutRow, args: dict[str, Any]) -> dict[str, Any]:
        try:
            response = await perform(row, model.model_validate(args))
        except SwerexError as exc:
            return {"swerexception": exc.transfer.model_dump()}
        return {"response": response.model_dump(mode="json") if isinstance(response, BaseModel) else response}

    return run
