"""`up` refuses to start when another process holds a port one of its services needs, naming
the service and the port, instead of reporting that other process's /healthz as its own."""

import os
import socket
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "scripts"))

import corral_platform  # noqa: E402 - from scripts/


def test_a_held_port_stops_up_before_anything_starts(tmp_path):
    (tmp_path / "run").mkdir()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(SystemExit) as stopped:
            corral_platform.check_ports_free({"api": port}, tmp_path)
        assert f"api needs port {port}" in str(stopped.value)
        assert not list((tmp_path / "run").iterdir())  # nothing was started
    corral_platform.check_ports_free({"api": port}, tmp_path)  # free again: no complaint


def test_a_port_held_by_this_platform_is_not_a_conflict(tmp_path):
    """`up` on a platform that is already up keeps its running services."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "api.pid").write_text(str(os.getpid()))
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        corral_platform.check_ports_free({"api": holder.getsockname()[1]}, tmp_path)
