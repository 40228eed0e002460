"""The checks every runtime makes on an exec request before running it, so a bad request gets
the same 400 (same message, same ``loc``) from a container and from a VM's guest agent."""

from corral_common.contracts.exec import ExecRequest
from corral_node_agent.errors import BadInput


def checked_argv(req: ExecRequest, env: dict[str, str]) -> list[str]:
    """The argv to run (a string command runs under ``/bin/sh -c``), once req and the env the
    command will get are known to be passable to execve."""
    argv = ["/bin/sh", "-c", req.cmd] if isinstance(req.cmd, str) else list(req.cmd)
    if not argv or not argv[0]:
        raise BadInput("cmd must not be empty", loc=["body", "cmd"])
    if any("\0" in a for a in argv):
        raise BadInput("cmd must not contain NUL bytes", loc=["body", "cmd"])
    for k, v in env.items():
        if not k or "=" in k or "\0" in k or "\0" in v:
            raise BadInput(f"invalid environment variable {k!r}", loc=["body", "env", k])
    if req.cwd is not None and "\0" in req.cwd:
        raise BadInput("cwd must not contain NUL bytes", loc=["body", "cwd"])
    return argv
