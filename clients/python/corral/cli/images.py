"""``corral images import|ls``."""

from contextlib import nullcontext
from typing import Annotated

import typer
from rich.table import Table

from corral.cli.context import get_state, plain
from corral.cli.render import age, size

app = typer.Typer(no_args_is_help=True)


@app.command("import")
def import_(ctx: typer.Context,
            source: Annotated[str, typer.Argument(help="docker save tarball, OCI layout (dir or tar), or a reference "
                                                      "in the operator's registry")],
            name: Annotated[str, typer.Option(help="layer name")],
            version: Annotated[str, typer.Option(help="layer version")],
            environment: Annotated[str | None, typer.Option(help="environment to create (default: NAME)")] = None,
            tag: Annotated[str | None, typer.Option(help="which image of a multi-image archive")] = None,
            wait: Annotated[bool, typer.Option(help="until the import is done")] = True,
            timeout: Annotated[float, typer.Option(help="seconds to wait")] = 600.0) -> None:
    """Import an image as layer(s) NAME:VERSION and an environment."""
    state = get_state(ctx)
    with state.client() as corral:
        with state.err.status(f"importing {source}…") if wait and not state.json else nullcontext():
            job = corral.images.import_image(source, name=name, version=version, environment=environment, tag=tag,
                                             wait=wait, timeout=timeout)
    state.emit(job, lambda j: state.out.print(
        f"{j.id} {j.state}" + (f" environment {plain(j.result).get('environment')}" if j.result else ""),
        highlight=False))


@app.command("ls")
def list_(ctx: typer.Context, kind: Annotated[str | None, typer.Option(help="base | workspace | toolkit | diff")] = None,
          ) -> None:
    """Your layers and the shared catalogue's."""
    state = get_state(ctx)
    with state.client() as corral:
        layers = corral.layers.list(kind)

    def human(_):
        table = Table("REF", "KIND", "SIZE", "SHARED", "AGE")
        for layer in layers:
            table.add_row(layer.ref, str(layer.kind), size(layer.size), "yes" if layer.shared else "", age(
                layer.created_at.isoformat()))
        state.out.print(table)

    state.emit(layers, human)
