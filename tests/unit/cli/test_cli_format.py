"""Pure pieces of the CLI: argument splitting, output trailers, progress counts, formatting, errors."""

import json

import httpx
import pytest
import typer
from rich.console import Console

from corral.cli import context, fncall, job, render, rollout, sandbox, shell
from corral.cli.main import split_json_flag
from corral.errors import CorralError


def test_json_flag_is_taken_from_anywhere_before_a_double_dash():
    assert split_json_flag(["sandbox", "ls", "--json"]) == (["sandbox", "ls"], True)
    assert split_json_flag(["--json", "nodes"]) == (["nodes"], True)
    assert split_json_flag(["sandbox", "exec", "sb", "--", "jq", "--json"]) == (
        ["sandbox", "exec", "sb", "--", "jq", "--json"], False)
    assert split_json_flag(["nodes"]) == (["nodes"], False)


@pytest.mark.parametrize("chunks", [
    [b"hello\n\x1ecorral-cwd:/tmp/x\x1e"],
    [b"hello\n\x1e", b"corral-cwd:/tm", b"p/x\x1e"],
    [b"hel", b"lo\n\x1ecor", b"ral-cwd:/tmp/x", b"\x1e"],
    [bytes([b]) for b in b"hello\n\x1ecorral-cwd:/tmp/x\x1e"],
])
def test_the_cwd_trailer_is_cut_out_however_the_stream_is_chunked(chunks):
    trailer = shell.CwdTrailer()
    shown = b"".join(trailer.feed(c) for c in chunks) + trailer.finish()
    assert shown == b"hello\n"
    assert trailer.cwd == "/tmp/x"


def test_output_that_only_looks_like_the_trailer_start_is_shown():
    trailer = shell.CwdTrailer()
    shown = trailer.feed(b"a\x1eb") + trailer.feed(b"\x1ecorral-x") + trailer.finish()
    assert shown == b"a\x1eb\x1ecorral-x"
    assert trailer.cwd is None  # a command that exited early prints no trailer: the old cwd stays


def test_output_is_passed_on_as_it_comes_not_at_the_end():
    trailer = shell.CwdTrailer()
    assert trailer.feed(b"line one\n") == b"line one\n"
    assert trailer.feed(b"partial\x1e") == b"partial"  # only the possible trailer start is held


def test_the_wrapped_line_keeps_its_exit_status():
    argv = shell.wrap("false")
    assert argv[:2] == ["sh", "-c"] and argv[2].startswith("false\n__corral_rc=$?\n")
    assert argv[2].rstrip().endswith("exit $__corral_rc")


def test_exit_codes_of_results():
    class R:
        def __init__(self, exit_code, timed_out=False, oom_killed=False):
            self.exit_code, self.timed_out, self.oom_killed = exit_code, timed_out, oom_killed

    assert [shell.exit_code_of(r) for r in (R(0), R(3), R(None, timed_out=True), R(None, oom_killed=True), R(None))] \
        == [0, 3, 124, 137, 1]


def test_remote_paths_are_id_colon_path_and_local_ones_are_not():
    assert sandbox.remote("sb-1:/tmp/a") == ("sb-1", "/tmp/a")
    assert sandbox.remote("sb-1:") == ("sb-1", ".")
    assert [sandbox.remote(p) for p in ("./a:b", "/x:y", "-", "file.txt", ":x")] == [None] * 5


def test_job_states_split_the_queued_from_the_pending():
    info = {"count": 10, "pending": 4, "counts": {"pending": 6, "running": 3, "terminated": 1}}
    assert job.state_counts(info) == {"queued": 4, "pending": 2, "running": 3, "terminated": 1}
    assert job.state_counts({"count": 2, "pending": 2, "counts": {"pending": 2}}) == {"queued": 2}
    assert job.ordered({"failed", "running", "queued", "weird"}) == ["queued", "running", "failed", "weird"]


def test_job_done_by_ended_or_running():
    info = {"count": 3, "counts": {"running": 2, "terminated": 1}}
    assert not job.done(info, "ended") and job.done(info, "running")
    assert job.done({"count": 3, "counts": {"failed": 1, "terminated": 1, "expired": 1}}, "ended")


def test_fncall_cases():
    assert fncall.parse_case("1 2=>3\\n") == {"stdin": "1 2\n", "expected_stdout": "3\n"}
    assert fncall.parse_case("1 2\\n=>3") == {"stdin": "1 2\n", "expected_stdout": "3"}  # a line, once
    assert fncall.parse_case("just input") == {"stdin": "just input\n"}
    assert fncall.parse_case("=>") == {"stdin": "", "expected_stdout": ""}


def test_render_helpers():
    assert render.age(100.0, now=105.0) == "5s"
    assert render.age(0, now=7200) == "2h"
    assert render.age("2026-01-01T00:00:00+00:00", now=1767225600 + 90) == "1m"
    assert render.age(None) == render.age("garbage") == "-"
    assert render.labels_text({"b": "2", "a": "1"}) == "a=1,b=2"
    assert render.labels_text({}) == "-"
    assert render.size(512) == "512 B" and render.size(3 * 1024 * 1024) == "3.0 MiB"
    assert render.counts_text({"running": 1, "failed": 2}) == "failed=2 running=1"


def test_capacity_bar_fill_and_colour():
    half = render.bar(5, 10, width=10)
    assert half.plain == "[#####-----]  50%"
    assert render.bar(20, 10, width=4).plain == "[####] 100%"  # over capacity is a full bar
    assert render.bar(1, None).plain == "n/a"
    assert any("red" in str(span.style) for span in render.bar(95, 100).spans)


def test_rollout_brief_shows_the_command_and_cuts_long_output():
    assert rollout.brief({"cmd": ["echo", "hi"]}) == "cmd=echo hi"
    assert rollout.brief({"exit_code": 0, "stdout": "a\nb"}) == "exit_code=0 stdout=a\\nb"
    assert len(rollout.brief({"stdout": "x" * 500}, width=20)) == 20
    assert rollout.brief(None) == "-"


def test_api_errors_become_exit_1_with_the_api_document():
    failure = context.failure_of(CorralError(404, "not_found", "sandbox x not found", [{"loc": ["path", "id"]}]))
    assert failure.code == context.EXIT_API
    assert failure.error == {"status": 404, "code": "not_found", "message": "sandbox x not found",
                             "details": [{"loc": ["path", "id"]}]}
    assert context.failure_of(httpx.ConnectError("refused")).code == context.EXIT_UNREACHABLE
    assert context.failure_of(TimeoutError("slow")).code == context.EXIT_TIMEOUT
    assert context.failure_of(KeyError("a bug")) is None  # a bug keeps its traceback


def test_report_prints_json_or_one_line(capsys):
    failure = context.CliFailure(1, {"status": 401, "code": "unauthorized", "message": "invalid API key",
                                     "details": [{"loc": ["header", "authorization"], "msg": "invalid API key"}]})
    context.report(failure, as_json=True)
    assert json.loads(capsys.readouterr().err) == {"error": failure.error}
    console = Console(stderr=True, no_color=True, width=200)
    context.report(failure, as_json=False, err=console)
    err = capsys.readouterr().err
    assert "401 unauthorized: invalid API key" in err and "header.authorization" in err


def test_plain_makes_sdk_answers_json():
    from datetime import UTC, datetime
    from enum import Enum

    class Colour(Enum):
        red = "red"

    class Model:
        def to_dict(self):
            return {"when": datetime(2026, 1, 1, tzinfo=UTC), "c": Colour.red, "raw": b"x"}

    assert context.plain([Model()]) == [{"when": "2026-01-01T00:00:00+00:00", "c": "red", "raw": "x"}]


def test_pairs_are_key_value_or_a_usage_error():
    assert context.pairs(["a=1", "b=x=y"], "--label") == {"a": "1", "b": "x=y"}
    with pytest.raises(typer.BadParameter):
        context.pairs(["nokey"], "--label")
    with pytest.raises(typer.BadParameter):
        context.pairs(["=v"], "--label")


def sandbox_row(**info):
    return type("Sb", (), {"info": {"id": "sb-0123456789abcdef", "state": "running", "backend": "container",
                                    "environment": "busybox-with-a-long-name", "cpu": 1.0, "memory_mb": 64,
                                    "node_id": "node-1", "created_at": None,
                                    "labels": {"suite": "cli-something", "run": "eval-7-long-label-value"},
                                    **info}})()


def test_piped_tables_keep_whole_ids(monkeypatch, capsys):
    """issue 34: stdout that is no terminal got tables cut to 80 columns (`corral sandbox ls |
    grep` saw `sb-012…`); piped, a table is as wide as its rows."""
    monkeypatch.delenv("COLUMNS", raising=False)
    context.State().out.print(sandbox.sandbox_table([sandbox_row()]))
    out = capsys.readouterr().out
    assert "sb-0123456789abcdef" in out and "run=eval-7-long-label-value,suite=cli-something" in out
    assert "…" not in out


class FollowedJob:
    """A job whose refresh walks through these infos."""

    def __init__(self, *infos):
        self.infos = list(infos)
        self.info = self.infos.pop(0)
        self.id = self.info["id"]

    def refresh(self):
        self.info = self.infos.pop(0)
        return self


def test_job_progress_ends_without_the_states_it_left():
    """issue 34: `corral job wait` with stderr not a terminal printed the bars once, at the end,
    with a stray `starting 0/100`: a state no sandbox is in any more is not shown."""
    import io

    err = io.StringIO()
    state = context.State(err=Console(file=err, width=120))
    infos = [{"id": "job-1", "count": 100, "counts": counts} for counts in
             ({"starting": 100}, {"starting": 40, "running": 60}, {"terminated": 100})]
    job.follow(state, FollowedJob(*infos), "ended", timeout=30, poll_s=0)
    shown = err.getvalue()
    assert "terminated" in shown and "100/100" in shown
    assert "starting" not in shown and "running" not in shown


def test_fncall_wrong_answers_show_expected_and_got():
    sent = [{"stdin": "1 2\n", "expected_stdout": "3"}, {"stdin": "2 2\n", "expected_stdout": "4"}, {"stdin": "x\n"}]
    results = [{"verdict": "accepted", "stdout": "3\n"}, {"verdict": "wrong_answer", "stdout": "5\n"},
               {"verdict": "accepted", "stdout": "x"}]
    assert fncall.mismatches(sent, results) == ["case 1: wrong_answer", '  expected: "4"', '  got:      "5\\n"']


def test_usage_reads_as_one_line():
    from corral.cli.sandbox import usage_text

    line = usage_text({"cpu_seconds": 1.5, "wall_time_s": 30, "working_set_bytes": 3 * 2**20,
                       "peak_memory_bytes": 5 * 2**20, "disk_used_bytes": 24 * 2**10, "oom_kills": 1})
    assert line == "cpu 1.50 s over 30 s · memory 3.0 MiB (peak 5.0 MiB) · disk 24.0 KiB · 1 OOM kill(s)"
