"""The sync and the async SDK have one surface: the same public methods, with the same
parameters and defaults, each awaited on the async side (an async iterator where the sync
side yields). They are built from one definition (corral._transport); this keeps them so."""

import inspect

import pytest

import corral
from corral import AsyncCorral, AsyncRollout, AsyncSandbox, Corral, Rollout, Sandbox
from corral.admin import Admin, AsyncAdmin, AsyncKeys, AsyncTenants, Keys, Tenants
from corral.fncall import fncall, fncall_body, fncall_many
from corral.images import AsyncEnvironments, AsyncImages, AsyncLayers, Environments, Images, Layers
from corral.jobs import AsyncJob, AsyncJobs, Job, Jobs
from corral.nodes import AsyncNodes, Nodes
from corral.rollouts import AsyncRollouts, Rollouts
from corral.sandboxes import AsyncSandboxes, Sandboxes
from corral.snapshots import AsyncSnapshots, Snapshots

PAIRS = [(Corral, AsyncCorral), (Sandbox, AsyncSandbox), (Sandboxes, AsyncSandboxes), (Job, AsyncJob),
         (Jobs, AsyncJobs), (Rollout, AsyncRollout), (Rollouts, AsyncRollouts), (Snapshots, AsyncSnapshots),
         (Layers, AsyncLayers), (Environments, AsyncEnvironments), (Images, AsyncImages), (Nodes, AsyncNodes),
         (Admin, AsyncAdmin), (Tenants, AsyncTenants), (Keys, AsyncKeys)]
ASYNC_OF = dict(PAIRS)
CONTEXT = {"__enter__": "__aenter__", "__exit__": "__aexit__"}


def public(cls: type) -> dict[str, object]:
    names = [n for n in dir(cls) if not n.startswith("_")] + [n for n in (*CONTEXT, *CONTEXT.values()) if hasattr(cls, n)]
    return {CONTEXT.get(n, n): inspect.getattr_static(cls, n) for n in names}


def parameters(fn: object) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize(("sync_cls", "async_cls"), PAIRS, ids=[s.__name__ for s, _ in PAIRS])
def test_sync_and_async_classes_have_the_same_methods_and_parameters(sync_cls, async_cls):
    sync, aio = public(sync_cls), public(async_cls)
    assert sorted(sync) == sorted(aio)
    for name, member in sync.items():
        other = aio[name]
        if isinstance(member, property):
            assert isinstance(other, property), name
            continue
        assert parameters(member) == parameters(other), name
        if inspect.isgeneratorfunction(member):
            assert inspect.isasyncgenfunction(other), name
        else:
            assert not inspect.iscoroutinefunction(member), name
            assert inspect.iscoroutinefunction(other), name
        assert member.__doc__ == other.__doc__, name


def test_the_clients_have_the_same_namespaces():
    sync, aio = Corral("http://corral.test", "key"), AsyncCorral("http://corral.test", "key")
    namespaces = {name: value for name, value in vars(sync).items() if not name.startswith("_") and name != "api"}
    assert set(namespaces) == {"sandboxes", "rollouts", "jobs", "snapshots", "layers", "environments", "images",
                               "nodes", "admin"}
    assert {name for name in vars(aio) if not name.startswith("_")} == {*namespaces, "api"}
    for name, value in namespaces.items():
        assert type(getattr(aio, name)) is ASYNC_OF[type(value)], name
    # what each namespace hands back is the same flavour
    assert (Sandboxes._sandbox, Jobs._job, Rollouts._rollout) == (Sandbox, Job, Rollout)
    assert (AsyncSandboxes._sandbox, AsyncJobs._job, AsyncRollouts._rollout) == (AsyncSandbox, AsyncJob, AsyncRollout)


def test_the_methods_issue_17_found_missing_exist():
    assert inspect.iscoroutinefunction(AsyncSandboxes.delete)
    # issue 34: an id (or a Sandbox) first; labels= as before
    assert [p[0] for p in parameters(AsyncSandboxes.delete)] == ["self", "sandbox", "labels", "wait", "timeout"]
    assert type(AsyncCorral("http://corral.test", "key").jobs) is AsyncJobs
    assert callable(Sandboxes.create_many) and callable(Sandboxes.delete_many)


def test_fncall_and_fncall_many_take_the_same_call_and_connection_options():
    body, one = parameters(fncall_body), parameters(fncall)
    assert one[:len(body)] == body  # fncall(**x) and fncall_many([x]) accept the same x
    connection = [(name, kind) for name, kind, _ in one[len(body):]]
    assert connection == [(name, kind) for name, kind, _ in parameters(fncall_many) if name in dict(connection)]
    assert not inspect.iscoroutinefunction(fncall) and inspect.iscoroutinefunction(fncall_many)


def test_top_level_names_are_unchanged():
    assert corral.__all__ == ["AsyncCorral", "AsyncRollout", "AsyncSandbox", "Corral", "CorralError", "Rollout",
                              "Sandbox", "SandboxFailed", "StepFailed", "StepInterrupted", "StepResult",
                              "click_event", "fncall", "fncall_many", "key_event", "move_event", "text_event"]
    assert all(hasattr(corral, name) for name in corral.__all__)
