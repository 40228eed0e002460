"""Host-side paths of a running container sandbox, for tests that look at it from outside:
its overlay and disk are mounted nowhere in the agent's namespace (bundle.detach), so they are
reached through the descriptors the backend keeps."""


def root_of(backend, sandbox_id: str) -> str:
    """The merged tree as the agent sees it (the layers + upper)."""
    return f"/proc/self/fd/{backend._sandboxes[sandbox_id].detached.root_fd}"


def disk_of(backend, sandbox_id: str) -> str:
    """The sandbox disk's root: upper/ (the writable layer) and work/."""
    return f"/proc/self/fd/{backend._sandboxes[sandbox_id].detached.disk_fd}"
