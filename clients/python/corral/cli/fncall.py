"""``corral fncall run FILE --runtime R [--stdin TEXT] [--case STDIN=>EXPECTED ...]``."""

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

import corral
from corral.cli.context import EXIT_CHECK, EXIT_USAGE, fail, get_state

app = typer.Typer(no_args_is_help=True)

CASE_SEPARATOR = "=>"


def parse_case(value: str) -> dict[str, str]:
    """``"1 2=>3"``: stdin ``1 2`` (as a line: a newline is added, as a file of input ends in
    one), expected stdout ``3``; without ``=>`` only stdin. ``\\n`` is a newline. The expected
    output is compared by ``--compare`` (default tokens: ``3`` matches the ``3\\n`` printed)."""
    text = value.replace("\\n", "\n")
    stdin, sep, expected = text.partition(CASE_SEPARATOR)
    case = {"stdin": stdin if not stdin or stdin.endswith("\n") else stdin + "\n"}
    if sep:
        case["expected_stdout"] = expected
    return case


def load_tests(path: Path) -> list[dict[str, Any]]:
    try:
        tests = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        fail(EXIT_USAGE, "bad_tests", f"{path}: {exc}")
    if not isinstance(tests, list) or not all(isinstance(t, dict) for t in tests):
        fail(EXIT_USAGE, "bad_tests", f"{path}: a JSON list of {{\"stdin\", \"expected_stdout\"}} objects expected")
    return tests


@app.command()
def run(ctx: typer.Context, file: Annotated[Path, typer.Argument(help="source file ('-': stdin)")],
        runtime: Annotated[str, typer.Option(help="python, cpp, go, ruby... (see the api's /v1/fncall/runtimes)")],
        stdin: Annotated[str | None, typer.Option(help="the program's stdin (one run)")] = None,
        case: Annotated[list[str] | None, typer.Option("--case", help="STDIN or STDIN=>EXPECTED (repeatable)")] = None,
        tests: Annotated[Path | None, typer.Option(help="JSON file: a list of {stdin, expected_stdout}")] = None,
        time_limit_ms: Annotated[int, typer.Option()] = 2000,
        memory_limit_mb: Annotated[int, typer.Option()] = 256,
        compare: Annotated[str, typer.Option(help=(
            "tokens: the outputs' whitespace-separated words must match, so '=>3' accepts '3\\n' (as judges "
            "compare) | exact | float:<eps>"))] = "tokens") -> None:
    """Run code once per case in fresh sandboxes and judge it; exit 5 unless the verdict is accepted."""
    state = get_state(ctx)
    code = sys.stdin.read() if str(file) == "-" else _read(file)
    cases = [parse_case(c) for c in case or []] + (load_tests(tests) if tests else [])
    if stdin is not None and cases:
        fail(EXIT_USAGE, "usage", "--stdin is one run; with --case/--tests give stdin in each case")
    with state.client() as client:
        result = corral.fncall(runtime, code, tests=cases or None, stdin=stdin, time_limit_ms=time_limit_ms,
                               memory_limit_mb=memory_limit_mb, compare=compare, client=client)

    def human(r: dict[str, Any]) -> None:
        state.out.print(f"verdict: [bold]{r.get('verdict')}[/]", highlight=False)
        compiled = r.get("compile") or {}
        if compiled.get("stderr"):
            state.err.print(compiled["stderr"], highlight=False, markup=False)
        table = Table("#", "VERDICT", "EXIT", "MS", "KB", "STDOUT", "STDERR")
        for i, c in enumerate(r.get("cases") or []):
            table.add_row(str(i), str(c.get("verdict")), str(c.get("exit_code")), str(c.get("time_ms")),
                          str(c.get("memory_kb")), (c.get("stdout") or "")[:200], (c.get("stderr") or "")[:200])
        state.out.print(table)
        for line in mismatches(cases, r.get("cases") or []):
            state.out.print(line, highlight=False, markup=False)

    state.emit(result, human)
    if result.get("verdict") != "accepted":
        raise typer.Exit(EXIT_CHECK)


def mismatches(sent: list[dict[str, Any]], results: list[dict[str, Any]]) -> list[str]:
    """Each wrong answer's expected and actual output, quoted (a missing newline shows)."""
    lines = []
    for i, (case, result) in enumerate(zip(sent, results)):
        if result.get("verdict") == "wrong_answer" and case.get("expected_stdout") is not None:
            lines += [f"case {i}: wrong_answer", f"  expected: {json.dumps(case['expected_stdout'])}",
                      f"  got:      {json.dumps(result.get('stdout') or '')}"]
    return lines


def _read(file: Path) -> str:
    try:
        return file.read_text()
    except OSError as exc:
        fail(EXIT_USAGE, "local_file", f"cannot read {file}: {exc.strerror}")
