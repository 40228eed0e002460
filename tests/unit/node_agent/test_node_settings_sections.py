"""The node-agent's settings nested per package (vm, warm_pool, isolation, egress): each read
from CORRAL_NODE_<SECTION>__<FIELD>, and every flat name of before still works: environment
variable, keyword and attribute."""

import os

import pytest
from pydantic import ValidationError

from corral_node_agent.settings import FLAT_NAMES, NodeAgentSettings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith("CORRAL_"):
            monkeypatch.delenv(name)


# (flat env name of before, nested env name, value as set, (section, field), value as read)
CASES = [
    ("CORRAL_NODE_QEMU", "CORRAL_NODE_VM__QEMU", "/opt/qemu", ("vm", "qemu"), "/opt/qemu"),
    ("CORRAL_NODE_GUESTKIT_DIR", "CORRAL_NODE_VM__GUESTKIT_DIR", "/k", ("vm", "guestkit_dir"), "/k"),
    ("CORRAL_NODE_VM_ACCELERATOR", "CORRAL_NODE_VM__ACCELERATOR", "tcg", ("vm", "accelerator"), "tcg"),
    ("CORRAL_NODE_VM_MEMORY_OVERHEAD_MB", "CORRAL_NODE_VM__MEMORY_OVERHEAD_MB", "64", ("vm", "memory_overhead_mb"), 64),
    ("CORRAL_NODE_VM_BOOT_TIMEOUT_S", "CORRAL_NODE_VM__BOOT_TIMEOUT_S", "5", ("vm", "boot_timeout_s"), 5.0),
    ("CORRAL_NODE_VM_WATCHDOG_INTERVAL_S", "CORRAL_NODE_VM__WATCHDOG_INTERVAL_S", "0.5",
     ("vm", "watchdog_interval_s"), 0.5),
    ("CORRAL_NODE_VM_WATCHDOG_TIMEOUT_S", "CORRAL_NODE_VM__WATCHDOG_TIMEOUT_S", "2", ("vm", "watchdog_timeout_s"), 2.0),
    ("CORRAL_NODE_WARM_POOL_MAX", "CORRAL_NODE_WARM_POOL__MAX", "4", ("warm_pool", "max"), 4),
    ("CORRAL_NODE_WARM_POOL_SIZE", "CORRAL_NODE_WARM_POOL__SIZE", "3", ("warm_pool", "size"), 3),
    ("CORRAL_NODE_WARM_POOL_IDLE_S", "CORRAL_NODE_WARM_POOL__IDLE_S", "9", ("warm_pool", "idle_s"), 9.0),
    ("CORRAL_NODE_SANDBOX_USER", "CORRAL_NODE_ISOLATION__SANDBOX_USER", "2000:3000", ("isolation", "sandbox_user"),
     "2000:3000"),
    ("CORRAL_NODE_CONTAINER_UID_BASE", "CORRAL_NODE_ISOLATION__CONTAINER_UID_BASE", "-1",
     ("isolation", "container_uid_base"), -1),
    ("CORRAL_NODE_VM_UID_BASE", "CORRAL_NODE_ISOLATION__VM_UID_BASE", "5000", ("isolation", "vm_uid_base"), 5000),
    ("CORRAL_NODE_UID_REGISTRY_DIR", "CORRAL_NODE_ISOLATION__UID_REGISTRY_DIR", "/r",
     ("isolation", "uid_registry_dir"), "/r"),
    ("CORRAL_NODE_EGRESS_PROXY_PORT", "CORRAL_NODE_EGRESS__PROXY_PORT", "3129", ("egress", "proxy_port"), 3129),
    ("CORRAL_NODE_EGRESS_DNS_PORT", "CORRAL_NODE_EGRESS__DNS_PORT", "5353", ("egress", "dns_port"), 5353),
    ("CORRAL_NODE_EGRESS_HOSTS", "CORRAL_NODE_EGRESS__HOSTS", '{"m.internal": ["10.8.0.4"]}', ("egress", "hosts"),
     {"m.internal": ["10.8.0.4"]}),
    ("CORRAL_NODE_EGRESS_RESOLVER", "CORRAL_NODE_EGRESS__RESOLVER", "10.0.0.53", ("egress", "resolver"), "10.0.0.53"),
    ("CORRAL_NODE_EGRESS_UID", "CORRAL_NODE_EGRESS__UID", "1234", ("egress", "uid"), 1234),
    ("CORRAL_NODE_EGRESS_MAX_CONNECTIONS", "CORRAL_NODE_EGRESS__MAX_CONNECTIONS", "8", ("egress", "max_connections"), 8),
    ("CORRAL_NODE_EGRESS_POOL", "CORRAL_NODE_EGRESS__POOL", "0", ("egress", "pool"), 0),
]


def _read(settings: NodeAgentSettings, where: tuple[str, str]):
    return getattr(getattr(settings, where[0]), where[1])


@pytest.mark.parametrize("flat,nested,raw,where,value", CASES, ids=[c[0] for c in CASES])
def test_a_nested_setting_reads_its_nested_and_its_flat_env_name(monkeypatch, tmp_path, flat, nested, raw, where,
                                                                   value):
    monkeypatch.setenv(flat, raw)
    assert _read(NodeAgentSettings(state_dir=str(tmp_path)), where) == value
    monkeypatch.delenv(flat)
    monkeypatch.setenv(nested, raw)
    assert _read(NodeAgentSettings(state_dir=str(tmp_path)), where) == value


@pytest.mark.parametrize("flat,nested,raw,where,value", CASES, ids=[c[0] for c in CASES])
def test_the_flat_keyword_and_attribute_of_before_still_work(tmp_path, flat, nested, raw, where, value):
    keyword = flat.removeprefix("CORRAL_NODE_").lower()
    assert FLAT_NAMES[keyword] == where
    settings = NodeAgentSettings(state_dir=str(tmp_path), **{keyword: value})
    assert _read(settings, where) == value
    assert getattr(settings, keyword) == value


def test_the_nested_name_wins_over_the_flat_one_and_a_keyword_over_both(monkeypatch, tmp_path):
    monkeypatch.setenv("CORRAL_NODE_VM_BOOT_TIMEOUT_S", "5")
    monkeypatch.setenv("CORRAL_NODE_VM__BOOT_TIMEOUT_S", "7")
    assert NodeAgentSettings(state_dir=str(tmp_path)).vm.boot_timeout_s == 7.0
    assert NodeAgentSettings(state_dir=str(tmp_path), vm_boot_timeout_s=1).vm.boot_timeout_s == 1.0
    both = NodeAgentSettings(state_dir=str(tmp_path), vm_boot_timeout_s=1, vm={"watchdog_timeout_s": 3})
    assert (both.vm.boot_timeout_s, both.vm.watchdog_timeout_s) == (1.0, 3.0)


def test_a_bad_nested_value_is_refused_with_where_it_is(monkeypatch, tmp_path):
    monkeypatch.setenv("CORRAL_NODE_SANDBOX_USER", "nobody")
    with pytest.raises(ValidationError, match="sandbox_user must be UID"):
        NodeAgentSettings(state_dir=str(tmp_path))
    monkeypatch.delenv("CORRAL_NODE_SANDBOX_USER")
    monkeypatch.setenv("CORRAL_NODE_EGRESS__HOSTS", "not json")
    with pytest.raises(Exception, match="CORRAL_NODE_EGRESS__HOSTS"):
        NodeAgentSettings(state_dir=str(tmp_path))
    monkeypatch.delenv("CORRAL_NODE_EGRESS__HOSTS")
    with pytest.raises(ValidationError, match="warm_pool.size"):
        NodeAgentSettings(state_dir=str(tmp_path), warm_pool={"size": -1})


def test_every_part_reads_only_its_section_and_an_unknown_attribute_is_still_an_error(tmp_path):
    settings = NodeAgentSettings(state_dir=str(tmp_path))
    with pytest.raises(AttributeError):
        _ = settings.vm_no_such_setting


async def test_the_manager_is_built_from_the_sections(monkeypatch, tmp_path):
    from corral_node_agent.backends.base import Capability
    from corral_node_agent.backends.fake import FakeBackend
    from corral_node_agent.sandboxes.service import build_manager

    monkeypatch.setenv("CORRAL_NODE_WARM_POOL_MAX", "5")  # a flat name of before
    monkeypatch.setenv("CORRAL_NODE_WARM_POOL__IDLE_S", "30")
    monkeypatch.setenv("CORRAL_NODE_VM__MEMORY_OVERHEAD_MB", "96")
    settings = NodeAgentSettings(state_dir=str(tmp_path), image_service_url="http://127.0.0.1:9")
    manager = build_manager(settings, FakeBackend(capabilities=frozenset(Capability)))
    try:
        assert manager.pool is not None
        assert (manager.pool.max_size, manager.pool.size, manager.pool.idle_s) == (5, 0, 30.0)
        assert manager.vm_memory_overhead_mb == 96
    finally:
        await manager.close()
