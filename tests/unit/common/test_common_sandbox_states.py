import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from corral_common.contracts.sandboxes import (
    ALLOWED_TRANSITIONS,
    TERMINAL_STATES,
    FailureReason,
    SandboxSpec,
    SandboxState,
    can_transition,
)


def test_happy_path_is_allowed():
    path = ["pending", "scheduled", "starting", "running", "stopping", "terminated"]
    for current, target in zip(path, path[1:]):
        assert can_transition(current, target), (current, target)


@pytest.mark.parametrize("state", [s for s in SandboxState if s not in TERMINAL_STATES])
def test_every_live_state_can_fail(state):
    assert can_transition(state, SandboxState.failed)


@pytest.mark.parametrize("state", sorted(TERMINAL_STATES))
def test_terminal_states_are_final(state):
    assert ALLOWED_TRANSITIONS[state] == frozenset()
    assert not can_transition(state, SandboxState.running)


def test_no_going_back():
    assert not can_transition("running", "starting")
    assert not can_transition("stopping", "running")
    assert not can_transition("scheduled", "pending")


@pytest.mark.parametrize("field,value", [("memory_mb", 0), ("timeout_s", -1), ("cpu", 0), ("disk_mb", 1),
                                         ("backend", "lxc"), ("network", "bridge")])
def test_spec_rejects_bad_values(field, value):
    with pytest.raises(ValidationError) as info:
        SandboxSpec(**{"environment": "busybox", field: value})
    assert info.value.errors()[0]["loc"] == (field,)


def test_spec_needs_an_environment_unless_it_boots_a_disk_or_snapshot():
    with pytest.raises(ValidationError, match="environment is required"):
        SandboxSpec(environment="")
    assert SandboxSpec(disk_image="android:9").backend == "vm"
    assert SandboxSpec(from_snapshot="snap-1", backend="microvm").environment == ""


@pytest.mark.parametrize("kwargs,backend", [
    ({}, "container"),
    ({"isolation": "vm"}, "microvm"),
    ({"display": True}, "vm"),
    ({"isolation": "vm", "display": True}, "vm"),
    ({"backend": "microvm"}, "microvm"),
    ({"backend": "vm"}, "vm"),
])
def test_auto_backend_picks_the_lightest_kind_that_can_do_the_job(kwargs, backend):
    spec = SandboxSpec(environment="busybox", **kwargs)
    assert spec.backend == backend
    # issue 34: the resolved spec says what boundary its kind gives (a `vm` asked for by
    # display or backend is no container though isolation was left at its default)
    assert spec.isolation == ("container" if backend == "container" else "vm")
    assert SandboxSpec.model_validate(spec.model_dump()).isolation == spec.isolation


@pytest.mark.parametrize("kwargs", [
    {"backend": "container", "display": True},
    {"backend": "microvm", "display": True},
    {"backend": "container", "isolation": "vm"},
    {"backend": "microvm", "disk_image": "android"},
])
def test_explicit_backend_that_cannot_do_the_job_is_refused(kwargs):
    with pytest.raises(ValidationError):
        SandboxSpec(environment="busybox", **kwargs)


def test_spec_rejects_bad_env_and_labels():
    with pytest.raises(ValidationError):
        SandboxSpec(environment="e", env={"A=B": "x"})
    with pytest.raises(ValidationError):
        SandboxSpec(environment="e", labels={"bad key!": "x"})
    spec = SandboxSpec(environment="e", labels={"job": "a", "team.io/x": "1"})
    assert spec.labels["job"] == "a" and spec.network == "none"


def test_readme_names_every_state_and_failure_reason():
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    paragraph = readme[readme.index("States: "):].split("\n\n")[0]
    missing = [v.value for v in [*SandboxState, *FailureReason] if not re.search(rf"\b{v.value}\b", paragraph)]
    assert not missing, f"README.md's States paragraph lacks {missing}"


def test_a_records_error_survives_its_redis_hash_and_reads_with_its_reason():
    from corral_common.store.state_records import SandboxRecord

    record = SandboxRecord(id="sb-1", tenant="t", state=SandboxState.failed, spec=SandboxSpec(environment="e"),
                           created_at=1.0, updated_at=2.0, reason="start_failed", error="crun: EMFILE")
    back = SandboxRecord.from_hash(record.to_hash())
    assert (back.reason, back.error, back.why) == ("start_failed", "crun: EMFILE", " (start_failed: crun: EMFILE)")
    bare = SandboxRecord.from_hash(SandboxRecord(id="sb-2", tenant="t", state=SandboxState.running,
                                                 spec=SandboxSpec(environment="e"), created_at=1.0,
                                                 updated_at=1.0).to_hash())
    assert (bare.error, bare.why) == (None, "")
