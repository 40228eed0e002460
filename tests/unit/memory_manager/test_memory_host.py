"""Memory-manager host readers against a fake /proc and /sys tree (no root, no real kernel)."""

import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from corral_memory_manager.app import create_app
from corral_memory_manager.host.service import (
    HostMemoryService,
    parse_meminfo,
    parse_swaps,
)
from corral_memory_manager.settings import MemoryManagerSettings

MEMINFO = """\
MemTotal:       24683652 kB
MemFree:        23614184 kB
MemAvailable:   24111432 kB
Buffers:           33628 kB
Cached:           644708 kB
SwapCached:            0 kB
SwapTotal:       2097148 kB
SwapFree:        1048572 kB
HugePages_Total:       0
Hugepagesize:       2048 kB
"""

SWAPS = """\
Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority
/dev/zram0                              partition\t2097148\t\t1048576\t\t100
/var/lib/swap\\040file                   file\t\t1024\t\t0\t\t-2
"""

KSM = {"run": "1", "pages_to_scan": "100", "sleep_millisecs": "20", "pages_shared": "10",
       "pages_sharing": "250", "pages_unshared": "7", "full_scans": "3", "merge_across_nodes": "1"}


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def fake_host(tmp_path):
    proc, sys = tmp_path / "proc", tmp_path / "sys"
    _write(proc, "meminfo", MEMINFO)
    _write(proc, "swaps", SWAPS)
    for name, value in KSM.items():
        _write(sys, f"kernel/mm/ksm/{name}", value + "\n")
    _write(sys, "block/zram0/disksize", "2147483648\n")
    _write(sys, "block/zram0/comp_algorithm", "lzo lzo-rle [lz4] zstd\n")
    _write(sys, "block/zram1/disksize", "0\n")
    _write(sys, "block/zram1/comp_algorithm", "[lzo-rle] lz4\n")
    _write(sys, "block/sda/size", "1\n")
    return proc, sys


def _damon(sys: Path, states: list[str]) -> None:
    base = "kernel/mm/damon/admin/kdamonds"
    _write(sys, f"{base}/nr_kdamonds", f"{len(states)}\n")
    for i, state in enumerate(states):
        _write(sys, f"{base}/{i}/state", state + "\n")
        _write(sys, f"{base}/{i}/pid", ("77" if state == "on" else "-1") + "\n")
        (sys / f"{base}/{i}/contexts").mkdir(parents=True, exist_ok=True)


def _tree_snapshot(root: Path) -> dict[str, tuple[str, int]]:
    return {str(p): (p.read_text(), p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def client(fake_host):
    proc, sys = fake_host
    settings = MemoryManagerSettings(proc_root=str(proc), sys_root=str(sys), node_id="node-9", log_json=False)
    with TestClient(create_app(settings)) as c:
        yield c


# ---- parsing ----------------------------------------------------------------------------


def test_parse_meminfo_units():
    v = parse_meminfo(MEMINFO + "garbage line\nBad: x kB\n")
    assert v["MemTotal"] == 24683652 * 1024
    assert v["HugePages_Total"] == 0  # a count, not kB
    assert "Bad" not in v


def test_parse_swaps_decodes_escapes_and_flags_zram():
    swaps = parse_swaps(SWAPS)
    assert [s.filename for s in swaps] == ["/dev/zram0", "/var/lib/swap file"]
    zram, f = swaps
    assert (zram.type, zram.size_bytes, zram.used_bytes, zram.priority, zram.zram) == (
        "partition", 2097148 * 1024, 1048576 * 1024, 100, True)
    assert (f.type, f.priority, f.zram) == ("file", -2, False)
    assert parse_swaps("Filename Type Size Used Priority\n") == []


def test_meminfo_and_ksm(fake_host):
    proc, sys = fake_host
    svc = HostMemoryService("n", str(proc), str(sys), page_size=4096)
    m = svc.meminfo()
    assert (m.total_bytes, m.available_bytes, m.cached_bytes, m.buffers_bytes) == (
        24683652 * 1024, 24111432 * 1024, 644708 * 1024, 33628 * 1024)
    assert (m.swap_total_bytes, m.swap_free_bytes, m.swap_used_bytes) == (
        2097148 * 1024, 1048572 * 1024, 1048576 * 1024)
    k = svc.ksm()
    assert k.present and (k.run, k.pages_shared, k.pages_sharing, k.pages_unshared) == (1, 10, 250, 7)
    assert k.saved_bytes == 250 * 4096


def test_meminfo_without_memavailable_falls_back_to_free(tmp_path):
    _write(tmp_path, "meminfo", "MemTotal: 1000 kB\nMemFree: 400 kB\n")
    m = HostMemoryService("n", str(tmp_path), str(tmp_path)).meminfo()
    assert (m.available_bytes, m.swap_total_bytes, m.swap_used_bytes) == (400 * 1024, 0, 0)


def test_ksm_absent(tmp_path):
    k = HostMemoryService("n", str(tmp_path), str(tmp_path)).ksm()
    assert not k.present and k.run is None and k.saved_bytes == 0


def test_zram_devices(fake_host):
    proc, sys = fake_host
    svc = HostMemoryService("n", str(proc), str(sys))
    zram = {z.name: z for z in svc.zram()}
    assert set(zram) == {"zram0", "zram1"}
    assert (zram["zram0"].disksize_bytes, zram["zram0"].comp_algorithm, zram["zram0"].swap) == (2 << 30, "lz4", True)
    assert (zram["zram1"].comp_algorithm, zram["zram1"].swap) == ("lzo-rle", False)


# ---- DAMON detection (read only) --------------------------------------------------------


def test_damon_absent(fake_host):
    proc, sys = fake_host
    d = HostMemoryService("n", str(proc), str(sys)).damon()
    assert d.status == "absent" and "does not exist" in d.reason


def test_damon_busy_when_a_kdamond_runs(fake_host):
    proc, sys = fake_host
    _damon(sys, ["off", "on"])
    before = _tree_snapshot(sys)
    d = HostMemoryService("n", str(proc), str(sys)).damon()
    assert d.status == "busy"
    assert [(k.index, k.state, k.pid) for k in d.kdamonds] == [(0, "off", -1), (1, "on", 77)]
    assert "kdamond 1 (pid 77)" in d.reason
    assert _tree_snapshot(sys) == before  # detection wrote nothing


def test_damon_available_when_idle(fake_host):
    proc, sys = fake_host
    _damon(sys, ["off"])
    assert HostMemoryService("n", str(proc), str(sys)).damon().status == "available"
    _damon(sys, [])
    assert HostMemoryService("n", str(proc), str(sys)).damon().status == "available"


def test_damon_busy_when_a_damon_module_is_enabled(fake_host):
    proc, sys = fake_host
    _damon(sys, ["off"])
    _write(sys, "module/damon_reclaim/parameters/enabled", "Y\n")
    d = HostMemoryService("n", str(proc), str(sys)).damon()
    assert d.status == "busy" and d.modules_enabled == ["damon_reclaim"]


def test_damon_unreadable_admin_is_absent(fake_host):
    proc, sys = fake_host
    (sys / "kernel/mm/damon/admin/kdamonds").mkdir(parents=True)  # no nr_kdamonds: as if unreadable
    d = HostMemoryService("n", str(proc), str(sys)).damon()
    assert d.status == "absent" and "nr_kdamonds" in d.reason


# ---- HTTP -------------------------------------------------------------------------------


def test_get_memory(client, fake_host):
    _, sys = fake_host
    _damon(sys, ["on"])
    before = _tree_snapshot(sys)
    r = client.get("/v1/host/memory")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["node_id"] == "node-9"
    assert body["page_size"] == os.sysconf("SC_PAGE_SIZE")
    assert body["meminfo"]["total_bytes"] == 24683652 * 1024
    assert body["ksm"]["saved_bytes"] == 250 * body["page_size"]
    assert body["damon"]["status"] == "busy"
    assert [s["filename"] for s in body["swaps"]] == ["/dev/zram0", "/var/lib/swap file"]
    assert [z["name"] for z in body["zram"]] == ["zram0", "zram1"]
    assert _tree_snapshot(sys) == before
    assert client.get("/healthz").json() == {"status": "ok", "node_id": "node-9"}


def test_get_memory_without_meminfo_is_503(fake_host):
    proc, sys = fake_host
    (proc / "meminfo").unlink()
    with TestClient(create_app(MemoryManagerSettings(proc_root=str(proc), sys_root=str(sys)))) as c:
        r = c.get("/v1/host/memory")
    assert r.status_code == 503 and r.json()["error"]["code"] == "meminfo_unavailable"


def test_set_ksm_writes_knobs(client, fake_host):
    _, sys = fake_host
    r = client.post("/v1/host/ksm", json={"run": 0, "pages_to_scan": 500, "sleep_millisecs": 50})
    assert r.status_code == 200, r.text
    assert (r.json()["run"], r.json()["pages_to_scan"], r.json()["sleep_millisecs"]) == (0, 500, 50)
    ksm = sys / "kernel/mm/ksm"
    assert [(ksm / n).read_text().strip() for n in ("run", "pages_to_scan", "sleep_millisecs")] == ["0", "500", "50"]
    r = client.post("/v1/host/ksm", json={"run": 1})
    assert r.status_code == 200 and r.json()["run"] == 1 and r.json()["pages_to_scan"] == 500


@pytest.mark.parametrize("body, field", [
    ({}, "run"),
    ({"run": 2}, "run"),
    ({"run": -1}, "run"),
    ({"run": "1"}, "run"),
    ({"run": True}, "run"),
    ({"run": 1.0}, "run"),
    ({"run": 1, "pages_to_scan": 0}, "pages_to_scan"),
    ({"run": 1, "pages_to_scan": "100"}, "pages_to_scan"),
    ({"run": 1, "pages_to_scan": 10**9}, "pages_to_scan"),
    ({"run": 1, "sleep_millisecs": 0}, "sleep_millisecs"),
    ({"run": 1, "sleep_millisecs": -5}, "sleep_millisecs"),
    ({"run": 1, "merge_across_nodes": 0}, "merge_across_nodes"),
])
def test_set_ksm_rejects_bad_values(client, fake_host, body, field):
    _, sys = fake_host
    before = _tree_snapshot(sys)
    r = client.post("/v1/host/ksm", json=body)
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "validation_error"
    assert any(d["loc"][:2] == ["body", field] for d in err["details"]), err
    assert _tree_snapshot(sys) == before


def test_set_ksm_absent_is_503(tmp_path):
    _write(tmp_path, "meminfo", MEMINFO)
    with TestClient(create_app(MemoryManagerSettings(proc_root=str(tmp_path), sys_root=str(tmp_path)))) as c:
        r = c.post("/v1/host/ksm", json={"run": 1})
    assert r.status_code == 503 and r.json()["error"]["code"] == "ksm_absent"


def test_internal_token_required_when_set(fake_host):
    proc, sys = fake_host
    settings = MemoryManagerSettings(proc_root=str(proc), sys_root=str(sys), internal_token="s3cret")
    with TestClient(create_app(settings)) as c:
        assert c.get("/v1/host/memory").status_code == 401
        assert c.post("/v1/host/ksm", json={"run": 1}).status_code == 401
        assert c.get("/v1/host/memory", headers={"X-Corral-Internal-Token": "s3cret"}).status_code == 200
        assert c.get("/healthz").status_code == 200


# ---- settings ---------------------------------------------------------------------------


def test_settings_env_names(monkeypatch):
    monkeypatch.setenv("CORRAL_REDIS_URL", "redis://shared:1/0")
    monkeypatch.setenv("CORRAL_NODE_ID", "node-7")
    monkeypatch.setenv("CORRAL_MEMORY_MANAGER_HOST", "0.0.0.0")
    monkeypatch.setenv("CORRAL_MEMORY_MANAGER_PORT", "9003")
    monkeypatch.setenv("CORRAL_SYS_ROOT", "/host/sys")
    monkeypatch.setenv("CORRAL_PORT", "1")  # another service's setting is ignored
    s = MemoryManagerSettings()
    assert (s.redis_url, s.node_id, s.host, s.port, s.sys_root, s.proc_root) == (
        "redis://shared:1/0", "node-7", "0.0.0.0", 9003, "/host/sys", "/proc")


def test_settings_defaults(monkeypatch):
    for name in ("CORRAL_NODE_ID", "CORRAL_MEMORY_MANAGER_HOST", "CORRAL_MEMORY_MANAGER_PORT"):
        monkeypatch.delenv(name, raising=False)
    s = MemoryManagerSettings()
    assert (s.host, s.port, s.node_id) == ("127.0.0.1", 8003, "node-1")
    assert MemoryManagerSettings(node_id="x").node_id == "x"


def test_the_default_manager_runs_ksm_for_same_image_vms_and_stops_it_when_it_stops(fake_host):
    """KSM is on by default (idle guests of one image share ~70 of their 94 MiB of guest RAM),
    and a scanner the manager started does not outlive the manager."""
    import asyncio

    from corral_memory_manager.services import build_services

    proc, sys = fake_host
    run = sys / "kernel/mm/ksm/run"
    run.write_text("0\n")

    async def scenario() -> str:
        settings = MemoryManagerSettings(proc_root=str(proc), sys_root=str(sys), log_json=False)
        async with build_services(settings) as services:
            assert services.balloons.ksm is not None
            services.balloons.ksm.apply(["debian"] * settings.ksm_min_same_image)
            started = run.read_text().strip()
        return started

    assert asyncio.run(scenario()) == "1"
    assert run.read_text().strip() == "0"
