"""Which TCP sockets listen on this host, and whose they are (``ss``, iproute2)."""

import subprocess


def listening() -> list[tuple[str, int, set[int]]]:
    """(address, port, owner pids) of every TCP socket in LISTEN on this host."""
    out = subprocess.run(["ss", "-Hltnp"], check=True, capture_output=True, text=True).stdout
    found = []
    for line in out.splitlines():
        fields = line.split()
        owners = {int(part.split("=")[1].rstrip(",)")) for part in fields[-1].split(",") if part.startswith("pid=")}
        address, _, port = fields[3].rpartition(":")
        found.append((address.strip("[]"), int(port), owners))
    return found


def tree(pid: int) -> set[int]:
    """pid and every descendant of it."""
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], check=True, capture_output=True, text=True).stdout
    children: dict[int, list[int]] = {}
    for line in out.splitlines():
        child, parent = map(int, line.split())
        children.setdefault(parent, []).append(child)
    seen, todo = set(), [pid]
    while todo:
        p = todo.pop()
        seen.add(p)
        todo += children.get(p, [])
    return seen
