"""``corral admin``: tenants, their quotas and API keys (needs an operator key: --api-key, or a
profile holding one).

    corral --api-key $OPERATOR_KEY admin tenants create team-a --max-sandboxes 100 --max-cpu 64
    corral admin keys create team-a --name trainer      # prints the key, once
    corral admin keys rotate key-0123abcd               # the old key is refused at once
    corral admin tenants quota team-a --max-cpu none    # none: unlimited
    corral --json admin tenants show team-a             # quotas and usage as JSON

Registered by corral.cli.main as the ``admin`` group; output and errors as every command's
(corral.cli.context: ``--json`` prints one JSON document on stdout).
"""

from typing import Annotated, Any

import typer
from rich.table import Table

from corral.cli.context import get_state

app = typer.Typer(no_args_is_help=True, help="Tenants, API keys and quotas (operator key).")
tenants_app = typer.Typer(no_args_is_help=True, help="List, create and show tenants; set their quotas.")
keys_app = typer.Typer(no_args_is_help=True, help="List, create, rotate and revoke API keys.")
app.add_typer(tenants_app, name="tenants")
app.add_typer(keys_app, name="keys")

UNLIMITED_WORDS = ("none", "unlimited", "null")
QuotaOption = Annotated[str | None, typer.Option(metavar="N|none")]


def quota_value(key: str, value: str) -> int | float | None:
    """A quota as typed: a number, or none/unlimited for no limit."""
    if value.strip().lower() in UNLIMITED_WORDS:
        return None
    try:
        number = float(value) if key in ("max_cpu", "max_fncall_per_s") else int(value)
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not a number (or none)", param_hint="--" + key.replace("_", "-"))
    if number < 0:
        raise typer.BadParameter("must be 0 or more (or none)", param_hint="--" + key.replace("_", "-"))
    return number


def given_quotas(values: dict[str, str | None]) -> dict[str, Any]:
    return {key: quota_value(key, value) for key, value in values.items() if value is not None}


def quotas_text(quotas: dict[str, Any]) -> str:
    parts = [f"{key.removeprefix('max_')}={value}" for key, value in quotas.items() if value is not None]
    return ", ".join(parts) or "unlimited"


def _tenant_table(tenants: list[dict[str, Any]]) -> Table:
    table = Table("NAME", "QUOTAS", "DISABLED", "CREATED")
    for t in tenants:
        table.add_row(t["name"], quotas_text(t.get("quotas") or {}), "yes" if t.get("disabled") else "",
                      str(t.get("created_at", ""))[:19])
    return table


def _key_table(keys: list[dict[str, Any]]) -> Table:
    table = Table("ID", "TENANT", "NAME", "ROLE", "PREFIX", "CREATED", "REVOKED")
    for k in keys:
        table.add_row(k["id"], k["tenant"], k.get("name") or "", k["role"], k.get("prefix", "") + "…",
                      str(k.get("created_at", ""))[:19], str(k.get("revoked_at") or "")[:19])
    return table


@tenants_app.command("ls")
def tenants_ls(ctx: typer.Context) -> None:
    """Every tenant with its quotas."""
    state = get_state(ctx)
    with state.client() as corral:
        tenants = corral.admin.tenants.list()
    state.emit({"tenants": tenants}, lambda doc: state.out.print(_tenant_table(doc["tenants"])))


@tenants_app.command("create")
def tenants_create(ctx: typer.Context, name: str,
                   max_sandboxes: QuotaOption = None, max_cpu: QuotaOption = None, max_memory_mb: QuotaOption = None,
                   max_disk_mb: QuotaOption = None, max_image_bytes: QuotaOption = None,
                   max_fncall_per_s: QuotaOption = None) -> None:
    """A new tenant (quotas not given: unlimited). It has no key until `admin keys create`."""
    quotas = given_quotas({"max_sandboxes": max_sandboxes, "max_cpu": max_cpu, "max_memory_mb": max_memory_mb,
                           "max_disk_mb": max_disk_mb, "max_image_bytes": max_image_bytes,
                           "max_fncall_per_s": max_fncall_per_s})
    state = get_state(ctx)
    with state.client() as corral:
        tenant = corral.admin.tenants.create(name, **quotas)
    state.emit(tenant, lambda doc: state.out.print(_tenant_table([doc])))


def _show(state: Any, tenant: dict[str, Any]) -> None:
    state.out.print(_tenant_table([tenant]))
    usage = tenant.get("usage") or {}
    now, totals = usage.get("current") or {}, usage.get("totals") or {}
    quotas = tenant.get("quotas") or {}
    table = Table("IN USE", "NOW", "QUOTA")
    for what, key in (("sandboxes", "max_sandboxes"), ("cpu", "max_cpu"), ("memory_mb", "max_memory_mb"),
                      ("disk_mb", "max_disk_mb"), ("image_bytes", "max_image_bytes")):
        limit = quotas.get(key)
        table.add_row(what, str(now.get(what, "-")), "unlimited" if limit is None else str(limit))
    state.out.print(table)
    state.out.print(f"fncall calls/s: {quotas.get('max_fncall_per_s') or 'unlimited'}")
    state.out.print(f"totals of ended sandboxes: {totals.get('cpu_s', 0):.1f} cpu-s, "
                    f"{totals.get('memory_mb_s', 0):.0f} MiB·s, {totals.get('sandbox_hours', 0):.3f} sandbox-hours "
                    f"({totals.get('sandboxes_ended', 0)} sandboxes)")


@tenants_app.command("show")
def tenants_show(ctx: typer.Context, name: str) -> None:
    """The tenant, its quotas and its usage (now, and the totals of its ended sandboxes)."""
    state = get_state(ctx)
    with state.client() as corral:
        tenant = corral.admin.tenants.get(name)
    state.emit(tenant, lambda doc: _show(state, doc))


@tenants_app.command("quota")
def tenants_quota(ctx: typer.Context, name: str,
                  max_sandboxes: QuotaOption = None, max_cpu: QuotaOption = None, max_memory_mb: QuotaOption = None,
                  max_disk_mb: QuotaOption = None, max_image_bytes: QuotaOption = None,
                  max_fncall_per_s: QuotaOption = None,
                  disable: Annotated[bool | None, typer.Option("--disable/--enable",
                                                               help="refuse (or accept again) every key of it")] = None,
                  ) -> None:
    """Set the quotas given (none: unlimited); the others keep their value. Applies at once."""
    quotas = given_quotas({"max_sandboxes": max_sandboxes, "max_cpu": max_cpu, "max_memory_mb": max_memory_mb,
                           "max_disk_mb": max_disk_mb, "max_image_bytes": max_image_bytes,
                           "max_fncall_per_s": max_fncall_per_s})
    state = get_state(ctx)
    with state.client() as corral:
        tenant = corral.admin.tenants.update(name, disabled=disable, **quotas)
    state.emit(tenant, lambda doc: _show(state, doc))


@keys_app.command("ls")
def keys_ls(ctx: typer.Context, tenant: Annotated[str | None, typer.Option(help="only this tenant's")] = None) -> None:
    """Keys (ids, names, roles, first characters; never the keys)."""
    state = get_state(ctx)
    with state.client() as corral:
        keys = corral.admin.keys.list(tenant)
    state.emit({"keys": keys}, lambda doc: state.out.print(_key_table(doc["keys"])))


def _new_key(state: Any, doc: dict[str, Any]) -> None:
    state.out.print(_key_table([doc]))
    state.err.print("the key (shown this once; store it now):", highlight=False)
    state.out.print(doc["key"], highlight=False)


@keys_app.command("create")
def keys_create(ctx: typer.Context, tenant: str,
                name: Annotated[str, typer.Option(help="what the key is for")] = "",
                role: Annotated[str, typer.Option(help="tenant | operator")] = "tenant") -> None:
    """A new key for TENANT; prints the key once."""
    if role not in ("tenant", "operator"):
        raise typer.BadParameter("must be tenant or operator", param_hint="--role")
    state = get_state(ctx)
    with state.client() as corral:
        created = corral.admin.keys.create(tenant, name=name, role=role)
    state.emit(created, lambda doc: _new_key(state, doc))


@keys_app.command("rotate")
def keys_rotate(ctx: typer.Context, key_id: str) -> None:
    """A new key in place of KEY_ID (same tenant, name, role); the old one is refused at once."""
    state = get_state(ctx)
    with state.client() as corral:
        rotated = corral.admin.keys.rotate(key_id)
    state.emit(rotated, lambda doc: (_new_key(state, doc), state.err.print(f"revoked {doc['replaces']}")))


@keys_app.command("revoke")
def keys_revoke(ctx: typer.Context, key_id: str) -> None:
    """Revoke KEY_ID: refused at once on every api replica."""
    state = get_state(ctx)
    with state.client() as corral:
        revoked = corral.admin.keys.revoke(key_id)
    state.emit(revoked, lambda doc: state.out.print(_key_table([doc])))

