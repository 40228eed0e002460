"""``corral env create|ls``."""

from typing import Annotated

import typer
from rich.table import Table

from corral.cli.context import get_state, pairs
from corral.cli.render import age

app = typer.Typer(no_args_is_help=True)


@app.command()
def create(ctx: typer.Context, name: str,
           base: Annotated[str, typer.Option(help="base layer NAME:VERSION")],
           workspace: Annotated[str | None, typer.Option(help="workspace layer NAME:VERSION")] = None,
           toolkit: Annotated[str | None, typer.Option(help="toolkit layer NAME:VERSION")] = None,
           diff: Annotated[list[str] | None, typer.Option("--diff", help="diff layer NAME:VERSION (repeatable)")] = None,
           env: Annotated[list[str] | None, typer.Option("--env", "-e", help="KEY=VALUE default env")] = None,
           cwd: Annotated[str | None, typer.Option(help="default working directory")] = None) -> None:
    """An environment of layers; its sandboxes start from them."""
    state = get_state(ctx)
    image_config = {k: v for k, v in {"env": pairs(env, "--env") or None, "cwd": cwd}.items() if v}
    with state.client() as corral:
        created = corral.environments.create(name, base=base, workspace=workspace, toolkit=toolkit, diffs=diff,
                                             config=image_config or None)
    state.emit(created, lambda e: state.out.print(e.name, highlight=False))


@app.command("ls")
def list_(ctx: typer.Context) -> None:
    """Your environments and the shared ones."""
    state = get_state(ctx)
    with state.client() as corral:
        environments = corral.environments.list()

    def human(_):
        table = Table("NAME", "BASE", "LAYERS", "SHARED", "AGE")
        for e in environments:
            table.add_row(e.name, e.base, str(len(e.layers)), "yes" if e.shared else "", age(e.created_at.isoformat()))
        state.out.print(table)

    state.emit(environments, human)
