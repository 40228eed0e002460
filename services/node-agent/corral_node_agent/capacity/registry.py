"""The host-wide registry of node claims: agents sharing a host never claim more than it has.

A directory (``/run/corral/capacity`` by default; tmpfs, so a reboot forgets every claim)
with one JSON file per agent (``<node id>-<hash of its state dir>.json``: cpu, memory_mb,
pids) and a ``.lock`` file. Claiming runs under an exclusive flock of ``.lock``: read the
other claims, drop the stale ones, grant at most what they left of the host budget, write
this agent's file. The agent then holds an flock on its own file for as long as it runs, so
"is this claim alive?" needs no pid (pids differ across PID namespaces and get reused): a
claim whose file nobody holds is stale, unless ``in_use`` says the agent's sandboxes still
run (they outlive their agent, to be re-adopted, and keep using the share meanwhile). A
restarted agent (same state dir) takes over its own claim.

Agents in containers share the registry through a bind mount of the directory (flock works
across mount and PID namespaces on one file).
"""

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from corral_common.logging import get_logger
from corral_node_agent.capacity.resources import Resources, grant

log = get_logger(__name__)

LOCK_FILE = ".lock"


def agent_key(node_id: str, state_dir: str) -> str:
    """One agent on this host: its node id (readable) and its state dir (unique per agent)."""
    digest = hashlib.sha1(os.path.abspath(state_dir).encode(), usedforsecurity=False).hexdigest()[:8]
    return f"{node_id}-{digest}"


@dataclass
class Claim:
    key: str
    node_id: str
    resources: Resources
    wanted: Resources
    clamped: list[str] = field(default_factory=list)  # amounts cut to what the host had left
    fd: int = -1  # the claim file, flock'd while the agent runs

    def release(self) -> None:
        """The agent is done (its file stays until the next claimer finds it stale: sandboxes
        the agent leaves running for its next run still count)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


@dataclass
class Peer:
    key: str
    node_id: str
    resources: Resources
    meta: dict
    held: bool = False  # its agent runs (holds the file's flock)


class HostRegistry:
    def __init__(self, directory: str):
        self.directory = directory

    def _path(self, key: str) -> str:
        return os.path.join(self.directory, f"{key}.json")

    @contextlib.contextmanager
    def _locked(self):
        os.makedirs(self.directory, mode=0o755, exist_ok=True)
        fd = os.open(os.path.join(self.directory, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # drops the lock

    def _live_peers(self, own: str, in_use: Callable[[dict], bool]) -> list[Peer]:
        """Every other live claim; stale files are removed (call with the registry locked)."""
        peers = []
        for name in sorted(os.listdir(self.directory)):
            if not name.endswith(".json") or name[:-5] == own:
                continue
            path = os.path.join(self.directory, name)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    held = False
                except BlockingIOError:
                    held = True
                try:
                    data = json.loads(os.pread(fd, 1 << 16, 0) or b"{}")
                except ValueError:
                    data = {}
            finally:
                os.close(fd)
            if not held and not (data and in_use(data)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                continue
            peers.append(Peer(key=name[:-5], node_id=str(data.get("node_id", "")),
                              resources=Resources.from_dict(data.get("claim", {})), meta=data, held=held))
        return peers

    def peers(self, in_use: Callable[[dict], bool] = lambda _: False) -> list[Peer]:
        """The live claims on this host (stale ones are dropped on the way)."""
        with self._locked():
            return self._live_peers("", in_use)

    def claim(self, key: str, node_id: str, want: Resources, budget: Resources, *,
              meta: dict | None = None, in_use: Callable[[dict], bool] = lambda _: False) -> Claim:
        """Claim ``want`` for agent ``key``, clamped to what the live claims of other agents
        left of ``budget``. Raises RuntimeError if another live agent holds this key (two agents
        on one state dir) or this node id (two platforms on one host, each with its node-1):
        a node id names the node's cgroup (/corral/<node>), whose caps, sandbox count and
        memory-manager would be shared by both."""
        with self._locked():
            peers = self._live_peers(key, in_use)
            for peer in peers:
                if peer.node_id == node_id and peer.held:
                    raise RuntimeError(
                        f"node id {node_id!r} is taken on this host by a running node-agent (pid {peer.meta.get('pid')}, "
                        f"state dir {peer.meta.get('state_dir')}); both would share the node's cgroup "
                        f"/corral/{node_id}: give each node-agent on a host its own CORRAL_NODE_ID")
            got, clamped = grant(want, budget, [p.resources for p in peers])
            path = self._path(key)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise RuntimeError(f"another live agent holds the capacity claim {path} "
                                   "(two node-agents on one state dir?)") from None
            body = {"node_id": node_id, "claim": got.as_dict(), "wanted": want.as_dict(),
                    "budget": budget.as_dict(), "pid": os.getpid(), **(meta or {})}
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(body, sort_keys=True).encode(), 0)
        return Claim(key=key, node_id=node_id, resources=got, wanted=want, clamped=clamped, fd=fd)
