"""A sandbox restored from a snapshot takes the machine's shape from it (corral_api.sandboxes.restore)."""

import pytest

from corral_api.sandboxes.restore import restored_spec
from corral_api.sandboxes.schemas import SandboxCreate
from corral_common.contracts.sandboxes import SandboxSpec
from corral_common.web.errors import Unprocessable

SOURCE = SandboxSpec(environment="desktop", backend="microvm", memory_mb=1024, cpu=2, disk_mb=2048,
                     labels={"from": "source"}).model_dump(mode="json")


def request(**body) -> SandboxCreate:
    return SandboxCreate.model_validate({"from_snapshot": "snap-1", **body})


def test_inherits_kind_image_and_shape_and_keeps_the_rest():
    req = request(labels={"run": "7"}, timeout_s=60, env={"A": "1"})
    spec = restored_spec(req, SOURCE, req.requested_fields)
    assert (spec.backend, spec.environment, spec.memory_mb, spec.cpu, spec.disk_mb) == ("microvm", "desktop", 1024, 2, 2048)
    assert spec.labels == {"run": "7"} and spec.timeout_s == 60 and spec.env == {"A": "1"}
    assert spec.from_snapshot == "snap-1"


def test_repeating_the_snapshots_values_or_auto_is_fine():
    req = request(backend="microvm", memory_mb=1024, cpu=2, environment="desktop", isolation="vm")
    assert restored_spec(req, SOURCE, req.requested_fields).backend == "microvm"
    req = request(backend="auto")
    assert "backend" not in req.requested_fields  # "auto" says nothing
    assert restored_spec(req, SOURCE, req.requested_fields).backend == "microvm"


@pytest.mark.parametrize("field,value", [("memory_mb", 512), ("cpu", 1.0), ("backend", "vm"),
                                         ("environment", "other"), ("backend", "container"), ("disk_mb", 1024)])
def test_a_contradiction_is_422_naming_the_field(field, value):
    req = request(**{field: value})
    with pytest.raises(Unprocessable) as exc:
        restored_spec(req, SOURCE, req.requested_fields)
    assert exc.value.status_code == 422 and exc.value.loc == ["body", field] and field in exc.value.message
    assert exc.value.code == "snapshot_mismatch"


def test_asking_for_a_screen_a_microvm_snapshot_has_not_is_refused():
    req = request(display=True, backend="vm")
    with pytest.raises(Unprocessable) as exc:
        restored_spec(req, SOURCE, req.requested_fields)
    assert exc.value.loc[1] in ("backend", "display")


def test_spec_errors_are_clear():
    with pytest.raises(ValueError, match="display needs backend 'vm'"):
        SandboxCreate.model_validate({"environment": "e", "backend": "container", "display": True})
    with pytest.raises(ValueError, match="environment is required"):
        SandboxCreate.model_validate({})
