"""inspect_ai's sandbox provider ``corral`` (``inspect eval --sandbox corral[:config]``), found
through the ``inspect_ai`` entry point of the corral package.

One Corral sandbox per sample (per service of a compose file). The config may be:
- nothing: the environment ``CORRAL_ENVIRONMENT`` (default judge);
- a compose file: each service's ``image`` mapped to a Corral environment
  (corral.integrations.environment_for), its ``environment`` variables, ``mem_limit``/``cpus``;
  services are separate sandboxes without a network between them;
- a Dockerfile: its ``FROM`` image, mapped the same way (its build steps are not run: give the
  environment they would make a name in ``CORRAL_IMAGE_MAP``);
- a Corral environment name.
"""

import re
from pathlib import Path
from typing import Any, Literal, Union, overload

from inspect_ai.util import ExecResult, SandboxEnvironment, SandboxEnvironmentConfigType, sandboxenv
from inspect_ai.util._sandbox.environment import SandboxUnavailableError

from corral import AsyncCorral, CorralError
from corral.integrations import environment_for

MAX_OUTPUT = 10 * 1024 * 1024  # inspect's default per-stream limit
_FROM = re.compile(r"^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)", re.IGNORECASE | re.MULTILINE)
_MEMORY = re.compile(r"^(\d+)([kmg]?)b?$", re.IGNORECASE)


def _memory_mb(value: Any) -> int | None:
    match = _MEMORY.match(str(value or "").strip())
    if not match:
        return None
    number, unit = int(match.group(1)), match.group(2).lower()
    return {"": number // (1 << 20), "k": number // 1024, "m": number, "g": number * 1024}[unit] or None


def sandbox_specs(config: SandboxEnvironmentConfigType | None) -> dict[str, dict[str, Any]]:
    """Service name -> the sandboxes.create() arguments, default service first."""
    if config is None:
        return {"default": {"environment": environment_for(None)}}
    if not isinstance(config, str):
        raise ValueError(f"the corral sandbox takes a compose file, a Dockerfile or an environment name, not {config!r}")
    path = Path(config)
    if path.name.endswith((".yaml", ".yml")):
        import yaml

        services = (yaml.safe_load(path.read_text()) or {}).get("services") or {}
        if not services:
            raise ValueError(f"{config} has no services")
        specs = {}
        for name, service in services.items():
            spec: dict[str, Any] = {"environment": environment_for(service.get("image"))}
            env = service.get("environment") or {}
            if isinstance(env, list):
                env = dict(item.split("=", 1) for item in env if "=" in item)
            if env:
                spec["env"] = {str(k): str(v) for k, v in env.items()}
            if memory := _memory_mb(service.get("mem_limit")):
                spec["memory_mb"] = memory
            if service.get("cpus"):
                spec["cpu"] = float(service["cpus"])
            specs[name] = spec
        default = next((n for n, s in services.items() if (s.get("x-default") or n == "default")), next(iter(specs)))
        return {default: specs[default], **{n: s for n, s in specs.items() if n != default}}
    if path.name == "Dockerfile" or path.suffix == ".Dockerfile" or path.stem == "Dockerfile":
        images = _FROM.findall(path.read_text())
        if not images:
            raise ValueError(f"{config} has no FROM line")
        return {"default": {"environment": environment_for(images[-1])}}
    # inspect hands a config string over as a path made absolute against the task's directory
    # (`--sandbox corral:debian-python` arrives as /that/dir/debian-python): where no such file
    # is, the last part is the environment name the user wrote.
    return {"default": {"environment": path.name if path.is_absolute() and not path.is_file() else config}}


@sandboxenv(name="corral")
class CorralSandboxEnvironment(SandboxEnvironment):
    def __init__(self, corral: AsyncCorral, sandbox: Any):
        super().__init__()
        self.corral = corral
        self.sandbox = sandbox

    @classmethod
    def config_files(cls) -> list[str]:
        return ["compose.yaml", "Dockerfile"]

    @classmethod
    def is_docker_compatible(cls) -> bool:
        return True

    @classmethod
    async def sample_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None,
                          metadata: dict[str, str]) -> dict[str, SandboxEnvironment]:
        corral = AsyncCorral()
        made: dict[str, SandboxEnvironment] = {}
        try:
            for name, spec in sandbox_specs(config).items():
                environment = spec.pop("environment")
                sandbox = await corral.sandboxes.create(environment, labels={"framework": "inspect_ai",
                                                                             "task": task_name[:60], "service": name},
                                                        **spec)
                made[name] = cls(corral, sandbox)
        except BaseException:
            await cls.sample_cleanup(task_name, config, made, True)
            raise
        return made

    @classmethod
    async def sample_cleanup(cls, task_name: str, config: SandboxEnvironmentConfigType | None,
                             environments: dict[str, SandboxEnvironment], interrupted: bool) -> None:
        corral = None
        for env in environments.values():
            assert isinstance(env, CorralSandboxEnvironment)
            corral = env.corral
            try:
                await env.sandbox.delete(wait=False)
            except CorralError:
                pass  # ended already
        if corral is not None:
            await corral.close()

    async def exec(self, cmd: list[str], input: str | bytes | None = None, cwd: str | None = None,
                   env: dict[str, str] | None = None, user: str | None = None, timeout: int | None = None,
                   timeout_retry: bool = True, concurrency: bool = True) -> ExecResult[str]:
        stdin = input.decode() if isinstance(input, bytes) else input
        try:
            result = await self.sandbox.exec(cmd, stdin=stdin, cwd=cwd, env=env or {},
                                             user="user" if user not in (None, "root") else "root",
                                             timeout_s=timeout or 24 * 3600, output_limit=MAX_OUTPUT)
        except CorralError as exc:
            if exc.status in (404, 409):
                raise SandboxUnavailableError(exc.message) from exc
            raise
        if result.timed_out:
            raise TimeoutError(f"command {cmd!r} timed out after {timeout} s")
        return ExecResult(success=result.exit_code == 0, returncode=result.exit_code if result.exit_code is not None
                          else -1, stdout=result.stdout, stderr=result.stderr)

    async def write_file(self, file: str, contents: str | bytes) -> None:
        await self.sandbox.write_file(file, contents.encode() if isinstance(contents, str) else contents)

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> Union[str | bytes]:
        try:
            data = await self.sandbox.read_file(file)
        except CorralError as exc:
            if exc.status == 404:
                raise FileNotFoundError(f"{file}: {exc.message}") from exc
            if exc.code in ("is_a_directory", "not_a_file"):
                raise IsADirectoryError(file) from exc
            raise
        return data.decode() if text else data
