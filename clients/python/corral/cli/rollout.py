"""``corral rollout ls|show``: rollouts and their trajectory as a table of steps."""

import json
from typing import Annotated, Any

import typer
from rich.table import Table

from corral.cli.context import get_state, plain
from corral.cli.render import age

app = typer.Typer(no_args_is_help=True)


def brief(value: Any, width: int = 60) -> str:
    """One line of a step's args or observation: a command, an exit code and the output's start."""
    if value in (None, {}, []):
        return "-"
    if isinstance(value, dict):
        parts = []
        for key in ("cmd", "path", "exit_code", "stdout", "stderr", "error", "message"):
            if value.get(key) not in (None, ""):
                item = value[key]
                parts.append(f"{key}={' '.join(item) if isinstance(item, list) else item}")
        text = " ".join(parts) if parts else json.dumps(plain(value), separators=(",", ":"))
    else:
        text = str(value)
    text = text.replace("\n", "\\n")
    return text if len(text) <= width else text[:width - 1] + "…"


def trajectory_table(steps: list[Any]) -> Table:
    table = Table("#", "ACTION", "STATUS", "MS", "REPLAYED", "ARGS", "OBSERVATION")
    for step in steps:
        table.add_row(str(step.index), step.action, step.status,
                      "-" if step.duration_ms is None else f"{step.duration_ms:.0f}", "yes" if step.replayed else "",
                      brief(step.args), brief(step.error or step.observation))
    return table


@app.command("ls")
def list_(ctx: typer.Context, job_id: Annotated[str | None, typer.Option("--job", help="only this job id")] = None,
          status: Annotated[str | None, typer.Option(help="only this status")] = None) -> None:
    """Your rollouts."""
    state = get_state(ctx)
    with state.client() as corral:
        rollouts = corral.rollouts.list(job_id=job_id, status=status)

    def human(_):
        table = Table("ID", "JOB", "STATUS", "STEPS", "REWARD", "SANDBOX", "AGE")
        for r in rollouts:
            info = plain(r.info)
            table.add_row(info["id"], info["job_id"], info["status"], str(info["step_count"]),
                          "-" if info.get("reward") is None else f"{info['reward']:g}", info["sandbox_id"],
                          age(info.get("created_at")))
        state.out.print(table)

    state.emit([r.info for r in rollouts], human)


@app.command()
def show(ctx: typer.Context, rollout_id: str) -> None:
    """One rollout and its trajectory: each step's action, status, duration, replay and observation."""
    state = get_state(ctx)
    with state.client() as corral:
        rollout = corral.rollouts.attach(rollout_id)
        steps = rollout.trajectory()
    info = plain(rollout.info)
    info.pop("steps", None)
    document = {**info, "steps": [step.raw or plain(step.__dict__) for step in steps]}

    def human(_):
        state.out.print(f"[bold]{info['id']}[/] job {info['job_id']} {info['status']} sandbox {info['sandbox_id']} "
                        f"reward {info.get('reward', '-')}", highlight=False)
        state.out.print(trajectory_table(steps))

    state.emit(document, human)
