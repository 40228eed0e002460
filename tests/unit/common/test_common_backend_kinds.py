"""Backend kinds are one enum whose members are the strings on the wire: the spec's Literal
types (the public schema) name the same kinds, and a member compares and hashes as its string."""

from typing import get_args

from corral_common.contracts.sandboxes import VM_BACKENDS, Backend, BackendKind, ConcreteBackend, SandboxSpec


def test_the_enum_and_the_specs_literals_name_the_same_kinds():
    assert {k.value for k in BackendKind} == set(get_args(ConcreteBackend)) == set(get_args(Backend)) - {"auto"}


def test_a_kind_is_its_wire_string():
    spec = SandboxSpec(environment="busybox", display=True)
    assert spec.backend == BackendKind.vm and spec.backend in VM_BACKENDS
    assert {BackendKind.container: 1}["container"] == 1
    assert ",".join([BackendKind.container, BackendKind.vm]) == "container,vm"  # a heartbeat's backends
    assert SandboxSpec(environment="busybox", backend=BackendKind.microvm).model_dump(mode="json")["backend"] == "microvm"
