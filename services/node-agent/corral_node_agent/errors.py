"""Everything the node-agent raises on purpose, as one tree with no HTTP in it.

Backends, layers, the manager and the control path raise these; what a caller may catch is
decided by the class (``except StartFailed`` catches every failed start, whichever runtime),
not by a status code picked deep inside a runtime. Only the HTTP layer turns them into
answers, through one table (``corral_node_agent.http_errors.HTTP_ERRORS``); the bus path
turns a ``StartFailed`` into the sandbox's ``failed(reason)``.

``loc`` says which part of the request was wrong (``["query", "path"]``...), as in the
``details`` of the error body. A ``RuntimeFailure`` (crun, QEMU, a zygote or the guest link
misbehaving) is not the caller's fault and has no HTTP answer of its own: a 500.
"""

from corral_common.contracts.sandboxes import FailureReason


class NodeAgentError(Exception):
    def __init__(self, message: str, *, loc: list[str | int] | None = None):
        super().__init__(message)
        self.message = message
        self.loc = loc


class NotFound(NodeAgentError):
    """No such sandbox, file, snapshot... on this node."""


class BadInput(NodeAgentError):
    """The request itself is wrong (a path with `..`, an empty command, an unknown key)."""


class TooLarge(NodeAgentError):
    """An upload or stdin over its cap, or a sandbox disk that is full."""


class DiskFull(TooLarge):
    """The sandbox's disk (disk_mb) has no room left for what was written."""


class Conflict(NodeAgentError):
    """The sandbox's state does not allow this now."""


class AlreadyExists(Conflict):
    """A sandbox or snapshot id that is already in use."""


class SandboxPaused(Conflict):
    """Commands (and, for VMs, files) wait until the sandbox is resumed."""


class SandboxNotRunning(Conflict):
    """Pause/resume of a sandbox that is starting, stopping or over."""


class Unsupported(Conflict):
    """The sandbox's kind cannot do this (a container has no screen...)."""


class PortClosed(NodeAgentError):
    """Nothing listens on the sandbox port an ingress request is for."""


class PortBadAnswer(NodeAgentError):
    """The server on a sandbox port answered an ingress request with something that is not
    HTTP (or hung up before its answer): the sandbox's code, not Corral, is at fault."""


class Unavailable(NodeAgentError):
    """This node cannot do it now (it is full, a snapshot could not be written...)."""


class GuestKitMissing(Unavailable):
    """No usable VM guest kit (kernel + initramfs) on this node; the message says how to build one."""


class StartFailed(NodeAgentError):
    """A sandbox did not start; ``reason`` is what its failed state says."""

    def __init__(self, message: str, reason: FailureReason = FailureReason.start_failed, *,
                 loc: list[str | int] | None = None):
        super().__init__(message, loc=loc)
        self.reason = reason


class ImageUnavailable(NodeAgentError):
    """The environment or one of its layers cannot be obtained (→ failed(image_unavailable))."""


class EnvironmentNotFound(ImageUnavailable, NotFound):
    pass


class DiskImageNotFound(ImageUnavailable, NotFound):
    pass


class GuestAgentError(NodeAgentError):
    """A VM's guest agent failed a request in a way that is not the caller's fault."""


class GuestLost(GuestAgentError):
    """The connection to the guest agent is gone (VM stopped, crashed, or client closed)."""


class GuestTimeout(GuestLost):
    """The guest agent did not answer in time."""


class RuntimeFailure(NodeAgentError):
    """The machinery under a sandbox failed (crun, QEMU, a zygote, the guest link's framing)."""
