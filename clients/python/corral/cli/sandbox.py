"""``corral sandbox create|ls|get|exec|cp|rm|pause|resume``."""

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from corral.cli import shell
from corral.cli.context import EXIT_USAGE, fail, get_state, pairs, plain, resource_requests
from corral.cli.render import age, labels_text
from corral.errors import CorralError

app = typer.Typer(no_args_is_help=True)

Id = Annotated[str, typer.Argument(help="sandbox id")]


def sandbox_table(sandboxes: list[Any]) -> Table:
    table = Table("ID", "STATE", "BACKEND", "ENVIRONMENT", "CPU", "MEM MB", "NODE", "AGE", "LABELS")
    for sb in sandboxes:
        info = plain(sb.info)
        table.add_row(info["id"], info["state"], info["backend"], info.get("environment") or "-", f"{info['cpu']:g}",
                      str(info["memory_mb"]), info.get("node_id") or "-", age(info.get("created_at")),
                      labels_text(info.get("labels")))
    return table


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def usage_text(usage: dict[str, Any]) -> str:
    """One line of what a sandbox used: cpu, memory now and at peak, its disk, its network."""
    parts = [f"cpu {usage.get('cpu_seconds', 0):.2f} s over {usage.get('wall_time_s', 0):.0f} s"]
    if usage.get("working_set_bytes") or usage.get("peak_memory_bytes"):
        parts.append(f"memory {_size(usage.get('working_set_bytes', 0))} (peak {_size(usage.get('peak_memory_bytes', 0))})")
    if usage.get("disk_used_bytes"):
        parts.append(f"disk {_size(usage['disk_used_bytes'])}")
    if usage.get("network_tx_bytes") or usage.get("network_rx_bytes"):
        parts.append(f"network {_size(usage.get('network_tx_bytes', 0))} out, {_size(usage.get('network_rx_bytes', 0))} in")
    if usage.get("oom_kills"):
        parts.append(f"{usage['oom_kills']} OOM kill(s)")
    return " · ".join(parts)


def detail_table(document: dict[str, Any]) -> Table:
    table = Table("FIELD", "VALUE", show_header=False)
    for key, value in document.items():
        if value not in (None, {}, []):
            text = labels_text(value) if key == "labels" else usage_text(value) if key == "usage" else str(plain(value))
            table.add_row(key, text)
    return table


@app.command()
def create(ctx: typer.Context,
           environment: Annotated[str | None, typer.Argument(help="environment (default: the api's)")] = None,
           backend: Annotated[str | None, typer.Option(help="auto | container | microvm | vm")] = None,
           cpu: Annotated[float | None, typer.Option()] = None,
           memory_mb: Annotated[int | None, typer.Option()] = None,
           disk_mb: Annotated[int | None, typer.Option()] = None,
           timeout_s: Annotated[int | None, typer.Option(help="lifetime in seconds")] = None,
           pids_limit: Annotated[int | None, typer.Option(help="limit: tasks at once")] = None,
           cpu_request: Annotated[float | None, typer.Option(help="cores placement counts (default: idle use)")] = None,
           memory_request_mb: Annotated[int | None, typer.Option(help="MiB placement counts")] = None,
           disk_request_mb: Annotated[int | None, typer.Option(help="MiB of disk placement counts")] = None,
           pids_request: Annotated[int | None, typer.Option(help="tasks placement counts")] = None,
           label: Annotated[list[str] | None, typer.Option("--label", "-l", help="KEY=VALUE (repeatable)")] = None,
           env: Annotated[list[str] | None, typer.Option("--env", "-e", help="KEY=VALUE (repeatable)")] = None,
           workdir: Annotated[str | None, typer.Option()] = None,
           wait: Annotated[bool, typer.Option(help="return once it runs (or failed)")] = True,
           wait_timeout: Annotated[float, typer.Option(help="seconds to wait for it to run")] = 120.0) -> None:
    """Create a sandbox; prints its id (with --json: the sandbox). --cpu, --memory-mb, --disk-mb and
    --pids-limit are its limits; the --*-request options what placement counts."""
    state = get_state(ctx)
    spec = {"backend": backend, "cpu": cpu, "memory_mb": memory_mb, "disk_mb": disk_mb, "timeout_s": timeout_s,
            "pids_limit": pids_limit,
            "requests": resource_requests(cpu_request, memory_request_mb, disk_request_mb, pids_request),
            "labels": pairs(label, "--label") or None, "env": pairs(env, "--env") or None, "workdir": workdir}
    with state.client() as corral:
        sb = corral.sandboxes.create(environment, wait=wait, wait_timeout=wait_timeout,
                                     **{k: v for k, v in spec.items() if v is not None})
    state.emit(sb.info, lambda info: state.out.print(info.id, highlight=False))


@app.command("ls")
def list_(ctx: typer.Context,
          state_filter: Annotated[str | None, typer.Option("--state", help="only this state")] = None,
          label: Annotated[list[str] | None, typer.Option("--label", "-l", help="KEY=VALUE (all must match)")] = None,
          ) -> None:
    """List your sandboxes."""
    state = get_state(ctx)
    with state.client() as corral:
        sandboxes = corral.sandboxes.list(labels=pairs(label, "--label") or None, state=state_filter)
    state.emit([sb.info for sb in sandboxes], lambda _: state.out.print(sandbox_table(sandboxes)))


@app.command()
def get(ctx: typer.Context, sandbox_id: Id) -> None:
    """Show one sandbox (spec, state, node, usage: read on its node now while it runs, its
    totals once it ended)."""
    state = get_state(ctx)
    with state.client() as corral:
        sb = corral.sandboxes.get(sandbox_id)
        document = plain(sb.info)
        if sb.state in ("running", "paused"):
            try:
                document["usage"] = plain(sb.usage())
            except CorralError:  # it ended meanwhile: the record's totals are what there is
                document = plain(sb.refresh().info)
    state.emit(document, lambda info: state.out.print(detail_table(info)))


@app.command("exec")
def exec_(ctx: typer.Context, sandbox_id: Id,
         command: Annotated[list[str] | None, typer.Argument(help="the command (one argument: run by sh -c)")] = None,
         interactive: Annotated[bool, typer.Option("--interactive", "-i", help="with -t: a shell")] = False,
         tty: Annotated[bool, typer.Option("--tty", "-t", help="with -i: a shell")] = False,
         cwd: Annotated[str | None, typer.Option()] = None,
         env: Annotated[list[str] | None, typer.Option("--env", "-e", help="KEY=VALUE (repeatable)")] = None,
         user: Annotated[str, typer.Option(help="user | root")] = "user",
         stdin: Annotated[bool, typer.Option("--stdin", help="send this process's stdin to the command")] = False,
         timeout_s: Annotated[float, typer.Option("--timeout", help="seconds the command may run")] = 60.0) -> None:
    """Run a command and exit with its exit code (124: it timed out; 137: out of memory).

    `corral sandbox exec ID -- ls -l /` streams the output as it comes; `-it` gives a shell."""
    state = get_state(ctx)
    if interactive and tty:
        if command:
            fail(EXIT_USAGE, "usage", "-it takes no command: it starts a shell")
        with state.client() as corral:
            sb = corral.sandboxes.get(sandbox_id)
            raise typer.Exit(shell.interactive(sb, timeout_s))
    if not command:
        fail(EXIT_USAGE, "usage", "a command is needed (or -it for a shell)")
    cmd: list[str] | str = command[0] if len(command) == 1 else command
    kwargs: dict[str, Any] = {"cwd": cwd, "env": pairs(env, "--env") or None, "user": user, "timeout_s": timeout_s,
                              "stdin": sys.stdin.read() if stdin or interactive else None}
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    with state.client() as corral:
        sb = corral.sandboxes.get(sandbox_id)
        if state.json:
            result = sb.exec(cmd, **kwargs)
            state.emit(result)
            raise typer.Exit(shell.exit_code_of(result))
        code = 0
        for chunk in sb.exec_stream(cmd, output_encoding="base64", **kwargs):
            if chunk.type in ("stdout", "stderr"):
                stream = sys.stdout.buffer if chunk.type == "stdout" else sys.stderr.buffer
                stream.write(chunk.data_bytes or b"")
                stream.flush()
            elif chunk.type == "exit" and chunk.result is not None:
                code = shell.exit_code_of(chunk.result)
        raise typer.Exit(code)


def remote(spec: str) -> tuple[str, str] | None:
    """``ID:PATH`` → (id, path); a local path (``./a:b``, ``/x``, ``-``) → None."""
    head, sep, path = spec.partition(":")
    if not sep or not head or "/" in head or head in (".", ".."):
        return None
    return head, path or "."


@app.command()
def cp(ctx: typer.Context, source: Annotated[str, typer.Argument(help="ID:PATH or a local file ('-': stdin)")],
       dest: Annotated[str, typer.Argument(help="ID:PATH or a local file or directory ('-': stdout)")],
       mode: Annotated[str, typer.Option(help="file mode (octal) of an uploaded file")] = "644") -> None:
    """Copy one file into a sandbox or out of one."""
    state = get_state(ctx)
    src, dst = remote(source), remote(dest)
    if (src is None) == (dst is None):
        fail(EXIT_USAGE, "usage", "one of SOURCE and DEST must be ID:PATH, the other local")
    with state.client() as corral:
        if dst is not None:  # upload
            if source != "-" and Path(source).is_dir():
                fail(EXIT_USAGE, "usage", f"{source} is a directory: cp copies one file")
            try:
                data = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
            except OSError as exc:
                fail(EXIT_USAGE, "local_file", f"cannot read {source}: {exc.strerror}")
            sandbox_id, path = dst
            if path.endswith("/") and source != "-":
                path += Path(source).name
            corral.sandboxes.get(sandbox_id).write_file(path, data, int(mode, 8))
            document = {"sandbox_id": sandbox_id, "path": path, "bytes": len(data), "direction": "upload"}
        else:
            sandbox_id, path = src
            data = corral.sandboxes.get(sandbox_id).read_file(path)
            if dest == "-":
                if state.json:
                    fail(EXIT_USAGE, "usage", "--json and DEST '-' both want stdout")
                sys.stdout.buffer.write(data)
                sys.stdout.buffer.flush()
                return
            target = Path(dest) / Path(path).name if Path(dest).is_dir() else Path(dest)
            try:
                target.write_bytes(data)
            except OSError as exc:
                fail(EXIT_USAGE, "local_file", f"cannot write {target}: {exc.strerror}")
            document = {"sandbox_id": sandbox_id, "path": path, "bytes": len(data), "direction": "download",
                        "local": os.fspath(target)}
    state.emit(document, lambda doc: state.err.print(f"{doc['bytes']} bytes {doc['direction']}ed", highlight=False))


@app.command()
def rm(ctx: typer.Context, sandbox_ids: Annotated[list[str] | None, typer.Argument(help="sandbox ids")] = None,
       label: Annotated[list[str] | None, typer.Option("--label", "-l", help="KEY=VALUE: every match")] = None,
       wait: Annotated[bool, typer.Option(help="until each has stopped")] = False) -> None:
    """Delete sandboxes by id, or every live one matching all --label."""
    state = get_state(ctx)
    if not sandbox_ids and not label:
        fail(EXIT_USAGE, "usage", "give sandbox ids or --label KEY=VALUE")
    with state.client() as corral:
        deleted = [corral.sandboxes.delete(sid, wait=wait) for sid in sandbox_ids or []]
        if label:
            deleted += corral.sandboxes.delete(labels=pairs(label, "--label"))
    state.emit([sb.info for sb in deleted], lambda _: state.out.print(sandbox_table(deleted)))


@app.command()
def pause(ctx: typer.Context, sandbox_id: Id) -> None:
    """Freeze every process of the sandbox (exec and files answer 409 until resume)."""
    state = get_state(ctx)
    with state.client() as corral:
        sb = corral.sandboxes.get(sandbox_id).pause()
    state.emit(sb.info, lambda info: state.out.print(f"{info.id} {info.state}", highlight=False))


@app.command()
def resume(ctx: typer.Context, sandbox_id: Id) -> None:
    """Resume a paused sandbox."""
    state = get_state(ctx)
    with state.client() as corral:
        sb = corral.sandboxes.get(sandbox_id).resume()
    state.emit(sb.info, lambda info: state.out.print(f"{info.id} {info.state}", highlight=False))
