"""``corral job create|wait|ls|rm``: create shows a live progress bar per state until the job ended."""

import time
from contextlib import nullcontext
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from corral.cli.context import EXIT_CHECK, get_state, pairs, resource_requests
from corral.cli.render import age, counts_text

app = typer.Typer(no_args_is_help=True)

# The order bars are shown in: the way a sandbox goes (unknown states after these, by name).
STATE_ORDER = ("queued", "pending", "scheduled", "starting", "running", "paused", "stopping", "terminated",
               "expired", "failed")
ENDED = ("terminated", "failed", "expired")
STYLE = {"failed": "red", "expired": "yellow", "terminated": "green", "running": "cyan"}


def state_counts(info: dict[str, Any]) -> dict[str, int]:
    """The job's sandboxes per state, with those not yet admitted as ``queued``."""
    counts = dict(info.get("counts") or {})
    waiting = int(info.get("pending") or 0)  # admitted by the scheduler not yet
    if waiting:
        counts["queued"] = waiting
        counts["pending"] = max(0, counts.get("pending", 0) - waiting)  # the api counts them pending too
        if not counts["pending"]:
            del counts["pending"]
    return counts


def ordered(states: Any) -> list[str]:
    known = [s for s in STATE_ORDER if s in states]
    return known + sorted(s for s in states if s not in STATE_ORDER)


def done(info: dict[str, Any], until: str) -> bool:
    counts = info.get("counts") or {}
    reached = sum(counts.get(s, 0) for s in ENDED)
    if until == "running":
        reached += sum(counts.get(s, 0) for s in ("running", "paused", "stopping"))
    return reached >= int(info["count"])


def waiting_line(info: dict[str, Any]) -> str:
    """What the bars cannot say: why the queued sandboxes wait (the scheduler's reason for the
    job's next one) and where the job stands among the others; empty when nothing waits."""
    if not int(info.get("pending") or 0):
        return ""
    position = info.get("queue_position")
    where = "admitted next" if position == 0 else (f"{position} job(s) ahead" if position else "")
    reason = info.get("waiting_reason") or ""
    return " · ".join(part for part in (reason, where) if part)


def follow(state: Any, job: Any, until: str, timeout: float, poll_s: float = 0.5) -> Any:
    """Refresh the job until ``until`` (ended | running), a bar per state on stderr and under
    them why the queued ones wait (not with --json)."""
    deadline = time.monotonic() + timeout
    progress = Progress(TextColumn("{task.description:>11}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=state.err)
    waiting = Text(style="yellow")
    bars: dict[str, Any] = {}
    # One live display of the bars and the waiting line (a Progress is a Live of its own: it
    # cannot hold a line that is not a task, so both go in a Group).
    with Live(Group(progress, waiting), console=state.err, transient=False, refresh_per_second=4,
              redirect_stdout=False, redirect_stderr=False) if not state.json else nullcontext() as live:
        while True:
            counts = state_counts(job.info)
            for name in ordered(set(counts) | set(bars)):
                if name not in bars:  # bars keep their place: add new states in order
                    bars[name] = progress.add_task(f"[{STYLE.get(name, 'white')}]{name}", total=job.info["count"])
                # A state no sandbox is in any more is hidden: the last picture (all that is
                # printed when stderr is no terminal) shows where the sandboxes ended, not a
                # `starting 0/100` left over from the way there.
                progress.update(bars[name], completed=counts.get(name, 0), visible=counts.get(name, 0) > 0)
            waiting.plain = waiting_line(job.info)
            if live is not None:
                live.refresh()
            if done(job.info, until):
                return job
            if time.monotonic() > deadline:
                line = waiting_line(job.info)
                raise TimeoutError(f"job {job.id} not {until} after {timeout:g}s: {counts_text(counts)}"
                                   + (f" ({line})" if line else ""))
            time.sleep(poll_s)  # a person's refresh rate; the api has no job event stream
            job.refresh()


def finish(state: Any, job: Any, until: str) -> None:
    state.emit(job.info, lambda info: state.out.print(f"{info['id']}: {counts_text(info.get('counts') or {})}",
                                                      highlight=False))
    if until == "ended" and (job.info.get("counts") or {}).get("failed"):
        raise typer.Exit(EXIT_CHECK)


@app.command()
def create(ctx: typer.Context, environment: Annotated[str, typer.Argument(help="environment of every sandbox")],
           count: Annotated[int, typer.Option("--count", "-n", help="how many sandboxes")],
           weight: Annotated[float, typer.Option(help="fair-share weight")] = 1.0,
           priority: Annotated[int, typer.Option()] = 0,
           label: Annotated[list[str] | None, typer.Option("--label", "-l", help="KEY=VALUE (repeatable)")] = None,
           backend: Annotated[str | None, typer.Option()] = None,
           cpu: Annotated[float | None, typer.Option()] = None,
           memory_mb: Annotated[int | None, typer.Option()] = None,
           disk_mb: Annotated[int | None, typer.Option()] = None,
           timeout_s: Annotated[int | None, typer.Option(help="each sandbox's lifetime in seconds")] = None,
           pids_limit: Annotated[int | None, typer.Option(help="limit: tasks at once")] = None,
           cpu_request: Annotated[float | None, typer.Option(help="cores placement counts (default: idle use)")] = None,
           memory_request_mb: Annotated[int | None, typer.Option(help="MiB placement counts")] = None,
           disk_request_mb: Annotated[int | None, typer.Option(help="MiB of disk placement counts")] = None,
           pids_request: Annotated[int | None, typer.Option(help="tasks placement counts")] = None,

           wait: Annotated[bool, typer.Option(help="follow its progress until every sandbox ended")] = True,
           until: Annotated[str, typer.Option(help="with --wait: ended | running")] = "ended",
           timeout: Annotated[float, typer.Option(help="seconds to follow it")] = 3600.0) -> None:
    """Queue COUNT sandboxes of one spec; with --wait (default) a live bar per state."""
    state = get_state(ctx)
    _check_until(until)
    requests = resource_requests(cpu_request, memory_request_mb, disk_request_mb, pids_request)
    spec = {k: v for k, v in {"backend": backend, "cpu": cpu, "memory_mb": memory_mb, "disk_mb": disk_mb,
                              "timeout_s": timeout_s, "pids_limit": pids_limit, "requests": requests}.items()
            if v is not None}
    with state.client() as corral:
        job = corral.jobs.create(environment, count=count, weight=weight, priority=priority,
                                 labels=pairs(label, "--label") or None, **spec)
        state.note(f"job {job.id}: {count} sandboxes")
        if wait:
            follow(state, job, until, timeout)
        finish(state, job, until if wait else "")


def _check_until(until: str) -> None:
    if until not in ("ended", "running"):
        raise typer.BadParameter("ended or running", param_hint="--until")


@app.command()
def wait(ctx: typer.Context, job_id: str,
         until: Annotated[str, typer.Option(help="ended | running")] = "ended",
         timeout: Annotated[float, typer.Option(help="seconds")] = 3600.0) -> None:
    """Follow a job until every sandbox ended (or runs); exit 5 if some failed, 124 on timeout."""
    state = get_state(ctx)
    _check_until(until)
    with state.client() as corral:
        job = follow(state, corral.jobs.get(job_id), until, timeout)
        finish(state, job, until)


@app.command("ls")
def list_(ctx: typer.Context, all_: Annotated[bool, typer.Option("--all", "-a", help="deleted jobs too")] = False,
          ) -> None:
    """Your jobs, newest first."""
    state = get_state(ctx)
    with state.client() as corral:
        jobs = corral.jobs.list(include_deleted=all_)

    def human(_):
        table = Table("ID", "COUNT", "STATES", "QUEUED", "WEIGHT", "PRIORITY", "AGE", "DELETED")
        for job in jobs:
            info = job.info
            table.add_row(info["id"], str(info["count"]), counts_text(info.get("counts") or {}),
                          str(info.get("pending", 0)), f"{info.get('weight', 1):g}", str(info.get("priority", 0)),
                          age(info.get("created_at")), "yes" if info.get("deleted") else "")
        state.out.print(table)

    state.emit([job.info for job in jobs], human)


@app.command()
def rm(ctx: typer.Context, job_id: str) -> None:
    """Stop queuing and terminate every sandbox of the job."""
    state = get_state(ctx)
    with state.client() as corral:
        job = corral.jobs.delete(job_id)
    state.emit(job.info, lambda info: state.out.print(f"{info['id']} deleted", highlight=False))
