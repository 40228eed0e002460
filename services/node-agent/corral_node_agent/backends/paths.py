"""Sandbox paths as the API takes them, the same for every runtime.

Relative paths start at HOME; ``..`` is refused outright and components are bounded, so the
result is a list of plain names below the sandbox root. Containers resolve them host-side
(container/files.py), VMs hand them to the guest agent (vm/agent_client.py); both map an
errno on a path to the same API error (`os_error`), so a caller cannot tell the runtimes
apart by their errors.
"""

import errno

from corral_node_agent.errors import BadInput, Conflict, DiskFull, NotFound

HOME = "/home/user"  # the sandbox user's home: the working dir of commands, base of relative paths
ROOT_HOME = "/root"  # HOME of a command run as root
LOC = ["query", "path"]


def split_path(path: str) -> list[str]:
    """Sandbox path → components below the sandbox root. Relative paths start at HOME."""
    if not isinstance(path, str) or path == "":
        raise BadInput("path is required", loc=LOC)
    if "\0" in path:
        raise BadInput("path contains a NUL byte", loc=LOC)
    if len(path) > 4096:
        raise BadInput("path is too long", loc=LOC)
    if not path.startswith("/"):
        path = f"{HOME}/{path}"
    parts = []
    for comp in path.split("/"):
        if comp in ("", "."):
            continue
        if comp == "..":
            raise BadInput("path must not contain '..'", loc=LOC)
        if len(comp.encode()) > 255:
            raise BadInput("path component is too long", loc=LOC)
        parts.append(comp)
    return parts


def sandbox_path(parts: list[str]) -> str:
    return "/" + "/".join(parts)


DISK_FULL = "sandbox disk is full (disk_mb)"


def os_error(exc: OSError, parts: list[str]) -> Exception:
    where = sandbox_path(parts)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskFull(f"{where}: {DISK_FULL}", loc=["body"])
    if exc.errno == errno.ENOENT:
        return NotFound(f"{where}: no such file or directory", loc=LOC)
    if exc.errno == errno.ELOOP:
        return BadInput(f"{where}: symbolic links are not followed", loc=LOC)
    if exc.errno == errno.ENOTDIR:
        return BadInput(f"{where}: not a directory (or a symbolic link)", loc=LOC)
    if exc.errno == errno.EISDIR:
        return BadInput(f"{where}: is a directory", loc=LOC)
    if exc.errno == errno.ENXIO:
        return BadInput(f"{where}: not a regular file", loc=LOC)
    if exc.errno == errno.ETXTBSY:  # an upload over a program running in the sandbox
        return Conflict(f"{where}: a running program is executing it", loc=LOC)
    return exc
