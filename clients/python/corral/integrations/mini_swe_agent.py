"""mini-swe-agent's environment on a Corral sandbox (mini-swe-agent 2.x ``Environment``):

    environment:
      environment_class: corral.integrations.mini_swe_agent.CorralEnvironment
      image: judge            # a Corral environment (or an image name, see environment_for)
      cwd: /work

It behaves like mini-swe-agent's ``DockerEnvironment``: one sandbox per environment object,
each action a fresh ``interpreter`` process in it (``bash -lc`` by default) with stderr merged
into stdout, the same result dict, the same ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` check.
"""

import logging
import platform
from dataclasses import asdict, dataclass, field
from typing import Any

from corral import Corral
from corral.integrations import environment_for

SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


@dataclass
class CorralEnvironmentConfig:
    image: str = ""
    """A Corral environment, or a container image name mapped to one (corral.integrations.environment_for)."""
    cwd: str = "/"
    env: dict[str, str] = field(default_factory=dict)
    timeout: int = 30
    interpreter: list[str] = field(default_factory=lambda: ["bash", "-lc"])
    backend: str = "auto"
    memory_mb: int = 1024
    cpu: float = 1.0
    sandbox_timeout_s: float = 7200.0
    """Like DockerEnvironment's container_timeout: the sandbox ends by itself after this."""
    url: str | None = None
    api_key: str | None = None


class CorralEnvironment:
    def __init__(self, *, config_class: type = CorralEnvironmentConfig, logger: logging.Logger | None = None,
                 **kwargs: Any):
        self.logger = logger or logging.getLogger("minisweagent.environment")
        self.config = config_class(**kwargs)
        self.corral = Corral(self.config.url, self.config.api_key)
        self.sandbox = self.corral.sandboxes.create(
            environment_for(self.config.image), backend=self.config.backend, memory_mb=self.config.memory_mb,
            cpu=self.config.cpu, timeout_s=int(self.config.sandbox_timeout_s), labels={"framework": "mini-swe-agent"})
        self.logger.info("Started Corral sandbox %s", self.sandbox.id)

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        from minisweagent.utils.serialize import recursive_merge

        return recursive_merge(self._config_dict(), platform.uname()._asdict(), kwargs)

    def serialize(self) -> dict:
        return {"info": {"config": {"environment": self._config_dict(),
                                    "environment_type": f"{type(self).__module__}.{type(self).__name__}"}}}

    def _config_dict(self) -> dict[str, Any]:
        config = asdict(self.config)
        config.pop("api_key", None)  # never into trajectories
        return config

    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        command = action.get("command", "")
        limit = timeout or self.config.timeout
        try:
            # exec 2>&1 first: one stream in the order written, as DockerEnvironment's stderr=STDOUT.
            result = self.sandbox.exec([*self.config.interpreter, f"exec 2>&1\n{command}"],
                                       cwd=cwd or self.config.cwd, env=self.config.env, timeout_s=limit, user="root")
            if result.timed_out:
                raise TimeoutError(f"Command {command!r} timed out after {limit} seconds")
            output = {"output": result.stdout, "returncode": result.exit_code, "exception_info": ""}
        except Exception as exc:  # noqa: BLE001 - reported to the agent, as DockerEnvironment does
            output = {"output": "", "returncode": -1,
                      "exception_info": f"An error occurred while executing the command: {exc}",
                      "extra": {"exception_type": type(exc).__name__, "exception": str(exc)}}
        self._check_finished(output)
        return output

    def _check_finished(self, output: dict) -> None:
        lines = output.get("output", "").lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SUBMIT_MARKER and output["returncode"] == 0:
            from minisweagent.exceptions import Submitted

            submission = "".join(lines[1:])
            raise Submitted({"role": "exit", "content": submission,
                             "extra": {"exit_status": "Submitted", "submission": submission}})

    def cleanup(self) -> None:
        sandbox = getattr(self, "sandbox", None)
        if sandbox is not None:
            self.sandbox = None
            try:
                sandbox.delete(wait=False)
            finally:
                self.corral.close()

    def __del__(self) -> None:
        try:
            self.cleanup()
        except Exception:  # noqa: BLE001, S110 - interpreter shutdown: nothing left to report to
            pass
