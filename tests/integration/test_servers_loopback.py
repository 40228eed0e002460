"""The Redis and RabbitMQ that `make up` and CI start (scripts/servers.sh) listen on loopback
only, every socket of them (Redis, AMQP, epmd, the Erlang distribution port), and RabbitMQ
runs no management listener: a host with other users or a network sees nothing of them."""

import ipaddress
import shutil
import subprocess
from pathlib import Path

import pytest

from tests import ports
from tests.host_sockets import listening, tree

ROOT = Path(__file__).resolve().parents[2]


def test_servers_listen_on_loopback_only(tmp_path):
    if not (shutil.which("redis-server") and Path("/usr/lib/rabbitmq/bin/rabbitmq-server").exists()
            and shutil.which("ss")):
        pytest.skip("needs redis-server, rabbitmq-server and ss (iproute2)")
    taken = {port for _, port, _ in listening()}
    redis_port, amqp_port = ports.private(70), ports.private(80)
    assert not ({redis_port, *ports.broker_ports(amqp_port)} & taken), "a leftover server holds this worker's ports"
    epmd_port, dist_port = amqp_port + 1, amqp_port + 2  # as servers.sh derives them
    state = tmp_path / "servers"
    script = str(ROOT / "scripts/servers.sh")
    subprocess.run([script, "start", str(state), str(redis_port), str(amqp_port)], check=True, capture_output=True)
    try:
        for server in ("redis/redis", "rabbitmq/rabbitmq"):
            assert (state / f"{server}.pid").exists(), f"{server} did not start (its log is in {state})"
        ours = tree(int((state / "redis/redis.pid").read_text())) | tree(int((state / "rabbitmq/rabbitmq.pid").read_text()))
        # epmd is not the broker's child: it is found by its port.
        sockets = [(a, p) for a, p, owners in listening() if owners & ours or p == epmd_port]
        bound = {p for _, p in sockets}
        assert {redis_port, amqp_port, epmd_port, dist_port} <= bound, sockets
        assert bound.isdisjoint({15672, 15671}), sockets  # no management plugin
        exposed = [s for s in sockets if not ipaddress.ip_address(s[0]).is_loopback]
        assert exposed == [], f"listening beyond loopback: {exposed}"
    finally:
        subprocess.run([script, "stop", str(state)], check=False, capture_output=True)
