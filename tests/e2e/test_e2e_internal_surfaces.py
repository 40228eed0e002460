"""What the running platform (as `make up` starts it) shows a host with other users: its
secret files are 0600, no process of it listens beyond loopback, and every internal service
answers 401 without the internal token (200 with it), /healthz stays open."""

import ipaddress
import stat

import httpx

from tests.host_sockets import listening, tree
from tests.live_platform import internal_headers

# One route of each internal service that exposes data (node-<n> stands for every node).
PROTECTED = {"image-service": "/v1/environments", "scheduler": "/v1/nodes", "memory-manager": "/v1/host/memory",
             "node": "/v1/fncall/pools"}


def test_secret_files_are_owner_only(platform):
    state = platform["state"]
    for name in ("platform.json", "api-key", "internal-token"):
        assert stat.S_IMODE((state / name).stat().st_mode) == 0o600, name


def test_every_internal_service_wants_the_token(platform):
    for name, url in platform["urls"].items():
        if name == "api":
            continue
        path = PROTECTED["node" if name.startswith("node-") else name]
        bare = httpx.get(f"{url}{path}", timeout=10)
        assert bare.status_code == 401 and bare.json()["error"]["code"] == "unauthorized", (name, bare.text)
        assert httpx.get(f"{url}{path}", headers=internal_headers(platform), timeout=10).status_code == 200, name
        assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200, name


def test_no_process_of_the_platform_listens_beyond_loopback(platform):
    pids = set()
    for pid_file in (platform["state"] / "run").glob("*.pid"):
        pids |= tree(int(pid_file.read_text()))
    sockets = [(address, port) for address, port, owners in listening() if owners & pids]
    assert len(sockets) >= len(platform["urls"]), sockets
    exposed = [s for s in sockets if not ipaddress.ip_address(s[0]).is_loopback]
    assert exposed == [], f"listening beyond loopback: {exposed}"
