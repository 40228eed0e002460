"""Container uid ranges (uids.py, corral_host/userns.py): what each sandbox maps to on the host, how the
node hands ranges out and takes them back, and how config.json renders the mapping."""

import os
import time

import pytest

from corral_common.contracts.sandboxes import SandboxSpec
from corral_host.userns import RANGE_SIZE, IdRange
from corral_node_agent.errors import Unavailable
from corral_node_agent.isolation.policy import policy_for
from corral_node_agent.settings import NodeAgentSettings
from corral_node_agent.uids import CLAIM_GRACE_S, DERIVED_FIRST, DERIVED_RANGES, UidRanges
from tests.unit.node_agent import oci_config


def _settings(tmp_path, node_id="n1", **kw) -> NodeAgentSettings:
    kw.setdefault("uid_registry_dir", str(tmp_path / "registry"))
    return NodeAgentSettings(node_id=node_id, state_dir=str(tmp_path / node_id), **kw)


def _owner(tmp_path, name: str) -> str:
    path = tmp_path / "sandboxes" / name
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


def test_identity_maps_root_and_the_sandbox_user_into_the_range(tmp_path):
    ids = IdRange(host_base=300_000_000)
    identity = policy_for(SandboxSpec(environment="e"), _settings(tmp_path), ids).identity
    assert (identity.uid, identity.gid) == (1000, 1000)  # inside: what `id -u` says
    assert (identity.host_uid, identity.host_gid) == (300_001_000, 300_001_000)
    assert identity.host_root == (300_000_000, 300_000_000)
    assert "CAP_SETUID" in identity.root_capabilities  # root inside keeps them, in its namespace
    plain = policy_for(SandboxSpec(environment="e"), _settings(tmp_path)).identity
    assert (plain.host_uid, plain.host_root, plain.ids) == (1000, (0, 0), None)


def test_config_json_renders_the_user_namespace(tmp_path):
    settings = _settings(tmp_path)
    ids = IdRange(host_base=DERIVED_FIRST)
    cfg = oci_config.build_config("sb-1", policy_for(SandboxSpec(environment="e"), settings, ids), env={}, node_id="n1")
    lin = cfg["linux"]
    assert [n["type"] for n in lin["namespaces"]] == ["pid", "network", "ipc", "uts", "mount", "cgroup", "user"]
    want = [{"containerID": 0, "hostID": DERIVED_FIRST, "size": RANGE_SIZE}]
    assert lin["uidMappings"] == want and lin["gidMappings"] == want
    assert cfg["process"]["user"] == {"uid": 1000, "gid": 1000, "additionalGids": [1000]}  # ids inside
    cfg = oci_config.build_config("sb-1", policy_for(SandboxSpec(environment="e"), settings), env={}, node_id="n1")
    assert "uidMappings" not in cfg["linux"] and {"type": "user"} not in cfg["linux"]["namespaces"]


def test_ranges_are_distinct_released_and_reused(tmp_path):
    pool = UidRanges(_settings(tmp_path, container_uid_base=1 << 30, max_sandboxes=3))
    got = [pool.acquire(_owner(tmp_path, f"s{i}")) for i in range(3)]
    assert [r.host_base for r in got] == [(1 << 30) + i * RANGE_SIZE for i in range(3)]
    with pytest.raises(Unavailable):
        pool.acquire(_owner(tmp_path, "s3"))
    pool.release(got[1])
    pool.release(got[1])  # twice is harmless
    assert pool.acquire(_owner(tmp_path, "s4")) == got[1]
    assert sorted(os.listdir(tmp_path / "registry")) == [".lock", *sorted(str(r.host_base) for r in got)]


def test_derived_start_depends_on_the_node_id(tmp_path):
    a, b = UidRanges(_settings(tmp_path, "node-1")), UidRanges(_settings(tmp_path, "node-2"))
    ra, rb = a.acquire(_owner(tmp_path, "a")), b.acquire(_owner(tmp_path, "b"))
    for r in (ra, rb):
        assert DERIVED_FIRST <= r.host_base < DERIVED_FIRST + DERIVED_RANGES * RANGE_SIZE <= 1 << 31
        assert (r.host_base - DERIVED_FIRST) % RANGE_SIZE == 0
    assert ra != rb


def test_two_agents_on_one_registry_never_share_a_range(tmp_path):
    # The same base for both (a misconfiguration, or two node ids hashing alike): the
    # host-wide registry still keeps them apart.
    a = UidRanges(_settings(tmp_path, "node-a", container_uid_base=1 << 30))
    b = UidRanges(_settings(tmp_path, "node-b", container_uid_base=1 << 30))
    taken = [p.acquire(_owner(tmp_path, f"{p.node_id}-{i}")) for i in range(4) for p in (a, b)]
    assert len({r.host_base for r in taken}) == 8


def test_restart_claims_adopted_ranges_and_frees_the_rest(tmp_path):
    settings = _settings(tmp_path, container_uid_base=1 << 30)
    first = UidRanges(settings)
    sandboxes = str(tmp_path / "sandboxes")
    kept, dropped = first.acquire(_owner(tmp_path, "kept")), first.acquire(_owner(tmp_path, "dropped"))
    other = UidRanges(_settings(tmp_path, "other", container_uid_base=1 << 30))
    elsewhere = other.acquire(str(tmp_path / "elsewhere"))  # another agent's sandbox dir
    again = UidRanges(settings)  # the restarted agent: adopts "kept", deletes "dropped"
    again.claim(kept, f"{sandboxes}/kept")
    again.release_unheld(sandboxes)
    assert sorted(os.listdir(tmp_path / "registry")) == sorted([".lock", str(kept.host_base),
                                                                  str(elsewhere.host_base)])
    assert again.acquire(_owner(tmp_path, "new")) == dropped  # free again, kept is not
    again.release(kept)
    assert str(kept.host_base) not in os.listdir(tmp_path / "registry")


def test_a_crashed_agents_claim_frees_itself_once_its_sandbox_dir_is_gone(tmp_path):
    pool = UidRanges(_settings(tmp_path, container_uid_base=1 << 30))
    gone = pool.acquire(str(tmp_path / "never-made"))
    live = pool.acquire(_owner(tmp_path, "live"))
    fresh = UidRanges(_settings(tmp_path, "n2", container_uid_base=1 << 30))
    # Young claims are being set up (their dir comes a moment later): never taken.
    assert fresh.acquire(_owner(tmp_path, "x")).host_base not in (gone.host_base, live.host_base)
    old = time.time() - CLAIM_GRACE_S - 1
    for r in (gone, live):
        os.utime(tmp_path / "registry" / str(r.host_base), (old, old))
    # An agent that has not looked at these claims lately (fresh skips them for FOREIGN_RECHECK_S).
    assert UidRanges(_settings(tmp_path, "n3", container_uid_base=1 << 30)).acquire(_owner(tmp_path, "y")) == gone


def test_another_agents_claims_are_not_read_again_on_every_acquire(tmp_path, monkeypatch):
    # Two agents whose walks cross (node-1 and node-2's derived starts are 390 ranges apart):
    # each acquire must not re-read every claim of the other, or a create costs O(sandboxes).
    other = UidRanges(_settings(tmp_path, "other", container_uid_base=1 << 30))
    theirs = [other.acquire(_owner(tmp_path, f"o{i}")) for i in range(20)]
    pool = UidRanges(_settings(tmp_path, "mine", container_uid_base=1 << 30))
    reads = []
    real_stale = UidRanges._stale
    monkeypatch.setattr(UidRanges, "_stale", lambda self, path, owner: reads.append(path) or real_stale(self, path, owner))
    mine = [pool.acquire(_owner(tmp_path, f"m{i}")) for i in range(10)]
    assert len(reads) == 20  # the first walk looked at each of theirs once, the next nine at none
    assert {r.host_base for r in mine}.isdisjoint(r.host_base for r in theirs)


def test_a_range_another_agent_gave_back_is_found_when_nothing_else_is_free(tmp_path):
    other = UidRanges(_settings(tmp_path, "other", container_uid_base=1 << 30, max_sandboxes=2))
    pool = UidRanges(_settings(tmp_path, "mine", container_uid_base=1 << 30, max_sandboxes=2))
    theirs = other.acquire(_owner(tmp_path, "o"))
    mine = pool.acquire(_owner(tmp_path, "m"))  # walks past theirs and remembers it
    other.release(theirs)
    assert pool.acquire(_owner(tmp_path, "m2")) == theirs != mine
    with pytest.raises(Unavailable):
        pool.acquire(_owner(tmp_path, "m3"))


def test_settings_that_cannot_work_are_refused(tmp_path):
    with pytest.raises(ValueError, match="overlap the VM uids"):
        UidRanges(_settings(tmp_path, container_uid_base=5000, vm_uid_base=100_000))
    with pytest.raises(ValueError, match="below 65536"):
        UidRanges(_settings(tmp_path, sandbox_user="70000"))
    disabled = UidRanges(_settings(tmp_path, container_uid_base=-1, sandbox_user="70000"))
    assert not disabled.enabled


def test_range_count_bounds_the_sandboxes_a_node_may_run(tmp_path):
    from corral_node_agent.uids import DERIVED_RANGES, id_range_count

    assert id_range_count(_settings(tmp_path)) == DERIVED_RANGES
    assert id_range_count(_settings(tmp_path, container_uid_base=-1)) is None
    assert id_range_count(_settings(tmp_path, container_uid_base=1 << 31, max_sandboxes=5)) == 5
    assert id_range_count(_settings(tmp_path, container_uid_base=1 << 31)) == (1 << 31) // 65536
