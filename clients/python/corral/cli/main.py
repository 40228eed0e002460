"""The ``corral`` command: global options, ``login``/``config``, and the command groups.

    corral [--url URL] [--api-key KEY] [--profile NAME] [--json] <group> <command> ...

``--json`` may also come after the command (``corral sandbox ls --json``); anything after a
``--`` (the command of ``sandbox exec``) is left alone. Errors never print a traceback: an api
error, a bad argument or an unreachable api is a message on stderr and an exit code
(corral.cli.context).
"""

import sys
from typing import Annotated

import typer
from rich.table import Table

from corral.cli import admin, config, env, fncall, images, job, nodes, rollout, sandbox
from corral.cli.context import EXIT_CONFIG, CliFailure, State, failure_of, get_state, report

app = typer.Typer(name="corral", help="Corral: sandboxes, jobs, rollouts and fncall from the shell.",
                  no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False)


@app.callback()
def root(ctx: typer.Context,
         url: Annotated[str | None, typer.Option(help="api URL (else CORRAL_URL, else the profile)")] = None,
         api_key: Annotated[str | None, typer.Option(help="API key (else CORRAL_API_KEY, else the profile)")] = None,
         profile: Annotated[str | None, typer.Option(help="profile of the config file (else CORRAL_PROFILE)")] = None,
         json_output: Annotated[bool, typer.Option("--json", help="print one JSON document on stdout")] = False,
         ) -> None:
    ctx.obj = State(url=url, api_key=api_key, profile=profile, json=json_output)


app.add_typer(sandbox.app, name="sandbox", help="Create, list, exec in, copy to/from and remove sandboxes.")
app.add_typer(images.app, name="images", help="Import container images and list layers.")
app.add_typer(env.app, name="env", help="Create and list environments.")
app.add_typer(job.app, name="job", help="Jobs: many sandboxes of one spec, with live progress.")
app.add_typer(rollout.app, name="rollout", help="Rollouts and their trajectories.")
app.add_typer(fncall.app, name="fncall", help="Run code against test cases (stateless).")
app.command("nodes", help="Live nodes with their capacity and use.")(nodes.nodes)
app.add_typer(admin.app, name="admin", help="Tenants, API keys and quotas (operator key).")

config_app = typer.Typer(help="Show or change the config file (profiles of url + API key).", no_args_is_help=True)
app.add_typer(config_app, name="config")


@app.command()
def login(ctx: typer.Context,
          url: Annotated[str | None, typer.Option(help="api URL to save")] = None,
          api_key: Annotated[str | None, typer.Option(help="API key to save (asked for when not given)")] = None,
          profile: Annotated[str, typer.Option(help="profile to write")] = "default",
          check: Annotated[bool, typer.Option(help="check the key against the api first")] = True) -> None:
    """Save url and API key as a profile (the file gets mode 0600) and make it the current one."""
    state = get_state(ctx)
    url = url or state.url
    api_key = api_key or state.api_key or typer.prompt("API key", hide_input=True)
    if check:
        checking = State(url=url, api_key=api_key, json=state.json)
        with checking.client() as corral:
            corral.sandboxes.list(state="running")  # any authenticated read: a bad key is a 401 here
    path = config.config_path()
    data = config.set_profile(_load(path), profile, make_current=True, url=url, api_key=api_key)
    config.save(path, data)
    state.emit({"profile": profile, "path": str(path), "url": data["profiles"][profile].get("url")},
               lambda doc: state.err.print(f"saved profile [bold]{doc['profile']}[/] in {doc['path']}"))


def _load(path):
    try:
        return config.load(path)
    except config.ConfigError as exc:
        raise CliFailure(EXIT_CONFIG, {"code": "bad_config", "message": str(exc)}) from None


@config_app.command("show")
def config_show(ctx: typer.Context) -> None:
    """Where url and key come from now (the key masked) and the file's profiles."""
    state = get_state(ctx)
    where = state.resolved()
    path = config.config_path()
    data = _load(path)
    document = {"path": str(path), "profile": where.profile, "url": where.url, "api_key": config.mask(where.api_key),
                "source": where.source,
                "profiles": {name: {"url": p.get("url"), "api_key": config.mask(str(p.get("api_key", "")))}
                             for name, p in data.get("profiles", {}).items()}}

    def human(doc):
        table = Table("setting", "value", "from", title=f"{doc['path']} (profile {doc['profile']})")
        table.add_row("url", doc["url"], doc["source"]["url"])
        table.add_row("api_key", doc["api_key"], doc["source"]["api_key"])
        state.out.print(table)
        for name, p in doc["profiles"].items():
            state.out.print(f"{'*' if name == doc['profile'] else ' '} {name}: {p['url'] or '-'}  key {p['api_key']}")

    state.emit(document, human)


@config_app.command("set")
def config_set(ctx: typer.Context, key: Annotated[str, typer.Argument(help="url or api_key")], value: str,
               profile: Annotated[str | None, typer.Option(help="profile to change (default: the current one)")] = None,
               ) -> None:
    """Set one setting of a profile."""
    state = get_state(ctx)
    path = config.config_path()
    data = _load(path)
    name = profile or state.profile or data.get("current") or "default"
    if key not in config.PROFILE_KEYS:
        raise typer.BadParameter(f"{key!r}: one of {', '.join(config.PROFILE_KEYS)}", param_hint="KEY")
    config.save(path, config.set_profile(data, name, **{key: value}))
    state.emit({"profile": name, "path": str(path), "set": key}, lambda doc: state.err.print(
        f"set {doc['set']} of profile {doc['profile']} in {doc['path']}"))


@config_app.command("use")
def config_use(ctx: typer.Context, profile: str) -> None:
    """Make ``profile`` the current one."""
    state = get_state(ctx)
    path = config.config_path()
    data = _load(path)
    if profile not in data.get("profiles", {}):
        raise typer.BadParameter(f"no profile {profile!r} in {path}", param_hint="PROFILE")
    config.save(path, {**data, "current": profile})
    state.emit({"current": profile}, lambda doc: state.err.print(f"current profile: {doc['current']}"))


def split_json_flag(argv: list[str]) -> tuple[list[str], bool]:
    """Take ``--json`` out of ``argv`` wherever it is before a ``--`` (so it works after the command too)."""
    cut = argv.index("--") if "--" in argv else len(argv)
    head, tail = argv[:cut], argv[cut:]
    found = "--json" in head
    return [a for a in head if a != "--json"] + tail, found


def main(argv: list[str] | None = None) -> None:
    args, as_json = split_json_flag(list(sys.argv[1:] if argv is None else argv))
    command = typer.main.get_command(app)
    try:
        # Standalone: typer prints usage errors (exit 2), help, and ends with typer.Exit's code.
        command.main(args=["--json", *args] if as_json else args, prog_name="corral", standalone_mode=True)
    except Exception as exc:  # noqa: BLE001 - every expected failure ends as a message and a code
        failure = failure_of(exc)
        if failure is None:
            raise
        report(failure, as_json)
        sys.exit(failure.code)


if __name__ == "__main__":
    main()
