"""Memory-manager against the real /proc and /sys of this host.

Reads only, except KSM: the current knob values are written back unchanged (needs root).
Never touches /sys/kernel/mm/damon (a kdamond that is not ours may run here).
"""

import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from corral_memory_manager.app import create_app
from corral_memory_manager.settings import MemoryManagerSettings

KSM = Path("/sys/kernel/mm/ksm")
DAMON_KDAMONDS = Path("/sys/kernel/mm/damon/admin/kdamonds")


@pytest.fixture
def client():
    with TestClient(create_app(MemoryManagerSettings(proc_root="/proc", sys_root="/sys", internal_token="",
                                                     log_json=False))) as c:
        yield c


def _damon_snapshot() -> dict[str, str]:
    out = {}
    if DAMON_KDAMONDS.is_dir():
        for p in DAMON_KDAMONDS.rglob("*"):
            if p.is_file() and p.name in ("nr_kdamonds", "state", "pid"):
                try:
                    out[str(p)] = p.read_text()
                except OSError:
                    pass
    return out


def test_real_host_memory_is_plausible(client):
    damon_before = _damon_snapshot()
    r = client.get("/v1/host/memory")
    assert r.status_code == 200, r.text
    body = r.json()
    m = body["meminfo"]
    assert m["total_bytes"] >= 64 << 20
    assert 0 < m["available_bytes"] <= m["total_bytes"]
    assert 0 <= m["free_bytes"] <= m["total_bytes"]
    assert 0 <= m["cached_bytes"] < m["total_bytes"]
    assert m["swap_used_bytes"] == m["swap_total_bytes"] - m["swap_free_bytes"] >= 0
    assert body["page_size"] == os.sysconf("SC_PAGE_SIZE")

    # Swap devices add up to SwapTotal (within a page per device of header rounding).
    total_swap = sum(s["size_bytes"] for s in body["swaps"])
    assert abs(total_swap - m["swap_total_bytes"]) <= 4096 * max(len(body["swaps"]), 1)
    for z in body["zram"]:
        assert z["name"].startswith("zram")

    k = body["ksm"]
    assert k["present"] == KSM.is_dir()
    if k["present"]:
        assert k["run"] in (0, 1, 2)
        assert k["pages_to_scan"] >= 0 and k["sleep_millisecs"] >= 0
        assert k["saved_bytes"] == k["pages_sharing"] * body["page_size"]

    d = body["damon"]
    assert d["status"] in ("available", "busy", "absent")
    if not Path("/sys/kernel/mm/damon/admin").is_dir():
        assert d["status"] == "absent"
    elif any(v.strip() == "on" for p, v in damon_before.items() if p.endswith("/state")):
        assert d["status"] == "busy"
    assert _damon_snapshot() == damon_before


@pytest.mark.skipif(os.geteuid() != 0, reason="writing KSM knobs needs root")
@pytest.mark.skipif(not KSM.is_dir(), reason="kernel without KSM")
def test_real_ksm_write_back_same_values(client):
    names = ("run", "pages_to_scan", "sleep_millisecs")
    before = {n: int((KSM / n).read_text()) for n in names}
    if before["run"] not in (0, 1):
        pytest.skip(f"KSM run={before['run']} (unmerge) is not a value this API sets")
    r = client.post("/v1/host/ksm", json=before)
    assert r.status_code == 200, r.text
    assert {n: r.json()[n] for n in names} == before
    assert {n: int((KSM / n).read_text()) for n in names} == before
