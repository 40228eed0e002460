"""Owner records on the node's disk: what a node needs to register a sandbox again."""

import dataclasses
import json
import os

import pytest

from corral_common.contracts.images import EnvironmentLayer
from corral_common.contracts.sandboxes import SandboxSpec, SandboxState
from corral_common.store.state_records import SandboxRecord
from corral_node_agent.sandboxes.owners import OwnerRecord, OwnerRecords


def owner(sandbox_id: str = "sb-1") -> OwnerRecord:
    spec = SandboxSpec(environment="e", memory_mb=64, labels={"suite": "x"})
    record = SandboxRecord(id=sandbox_id, tenant="t1", state=SandboxState.scheduled, spec=spec, created_at=10.0,
                           updated_at=11.0, node_id="n1", job_id="job-1", required_node="n1")
    return OwnerRecord.of(record, spec, started_at=12.0)


def test_written_read_back_and_removed(tmp_path):
    owners = OwnerRecords(str(tmp_path / "owners"))
    assert oct(os.stat(owners.directory).st_mode & 0o777) == "0o700"
    owners.write(owner())
    assert oct(os.stat(tmp_path / "owners/sb-1.json").st_mode & 0o777) == "0o600"
    got = owners.get("sb-1")
    assert got == owner()
    record = got.record("n1", SandboxState.paused, {"backend": "container"}, now=20.0)
    assert (record.tenant, record.state, record.node_id, record.created_at, record.started_at, record.updated_at,
            record.job_id, record.required_node, record.spec.labels) == (
        "t1", SandboxState.paused, "n1", 10.0, 12.0, 20.0, "job-1", "n1", {"suite": "x"})
    owners.remove("sb-1")
    owners.remove("sb-1")  # idempotent
    assert owners.get("sb-1") is None and owners.ids() == set()


def test_the_layers_it_runs_on_are_kept_and_an_older_record_has_none(tmp_path):
    owners = OwnerRecords(str(tmp_path))
    layer = EnvironmentLayer(kind="base", name="busybox", version="1", digest="sha256:" + "ab" * 32, size=42)
    owners.write(dataclasses.replace(owner(), layers=(layer,)))
    assert owners.get("sb-1").layers == (layer,)
    data = json.loads((tmp_path / "sb-1.json").read_text())
    del data["layers"]  # written by an agent from before layers were recorded
    (tmp_path / "sb-1.json").write_text(json.dumps(data))
    assert owners.get("sb-1") == owner()


def test_a_rewrite_is_atomic_and_leaves_no_temporary_file(tmp_path):
    owners = OwnerRecords(str(tmp_path))
    owners.write(owner())
    owners.write(owner())
    assert sorted(os.listdir(tmp_path)) == ["sb-1.json"]


def test_an_unreadable_record_is_none_not_an_error(tmp_path):
    owners = OwnerRecords(str(tmp_path))
    (tmp_path / "sb-bad.json").write_text("{not json")
    (tmp_path / "sb-old.json").write_text(json.dumps({"id": "sb-old"}))  # missing fields
    assert owners.get("sb-bad") is None and owners.get("sb-old") is None


def test_prune_keeps_only_the_adopted(tmp_path):
    owners = OwnerRecords(str(tmp_path))
    for sid in ("sb-1", "sb-2", "sb-3"):
        owners.write(owner(sid))
    (tmp_path / "sb-4.json.tmp").write_text("{}")  # a write a crash interrupted
    owners.prune({"sb-2"})
    assert sorted(os.listdir(tmp_path)) == ["sb-2.json"]


def test_ids_that_could_escape_the_directory_are_refused(tmp_path):
    owners = OwnerRecords(str(tmp_path / "owners"))
    (tmp_path / "secret.json").write_text(json.dumps(owner().to_json()))
    assert owners.get("../secret") is None  # never read
    with pytest.raises(ValueError, match="invalid sandbox id"):
        owners.write(owner("../secret"))
