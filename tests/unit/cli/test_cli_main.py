"""main(): what reaches the user when a command cannot run (no api needed)."""

import json

import pytest

from corral.cli.main import main


def run(argv, monkeypatch, tmp_path):
    for var in ("CORRAL_URL", "CORRAL_API_KEY", "CORRAL_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CORRAL_CONFIG", str(tmp_path / "config.toml"))
    with pytest.raises(SystemExit) as done:
        main(argv)
    return done.value.code


def test_no_key_is_exit_4_with_a_hint(monkeypatch, tmp_path, capsys):
    assert run(["sandbox", "ls"], monkeypatch, tmp_path) == 4
    captured = capsys.readouterr()
    assert captured.out == "" and "corral login" in captured.err and "Traceback" not in captured.err


def test_unreachable_api_is_exit_3_and_json_on_stderr_only(monkeypatch, tmp_path, capsys):
    code = run(["--url", "http://127.0.0.1:9", "--api-key", "k", "nodes", "--json"], monkeypatch, tmp_path)
    captured = capsys.readouterr()
    assert code == 3 and captured.out == ""
    assert json.loads(captured.err)["error"]["code"] == "unreachable"


def test_a_bad_argument_is_exit_2_without_a_traceback(monkeypatch, tmp_path, capsys):
    assert run(["--api-key", "k", "sandbox", "create", "--label", "nokey"], monkeypatch, tmp_path) == 2
    assert "KEY=VALUE" in capsys.readouterr().err
    assert run(["sandbox", "frobnicate"], monkeypatch, tmp_path) == 2
    assert run(["job", "wait", "job-1", "--until", "sometime", "--api-key", "k"], monkeypatch, tmp_path) == 2


def test_a_broken_config_file_is_exit_4_naming_it(monkeypatch, tmp_path, capsys):
    (tmp_path / "config.toml").write_text("[profiles\n")
    assert run(["sandbox", "ls"], monkeypatch, tmp_path) == 4
    assert "config.toml" in capsys.readouterr().err


def test_config_set_and_show_without_an_api(monkeypatch, tmp_path, capsys):
    assert run(["config", "set", "api_key", "ck-secret-123", "--profile", "lab"], monkeypatch, tmp_path) == 0
    assert run(["config", "set", "url", "http://lab:8000", "--profile", "lab"], monkeypatch, tmp_path) == 0
    capsys.readouterr()
    assert run(["--json", "config", "show"], monkeypatch, tmp_path) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["profile"], shown["url"], shown["source"]["url"]) == ("lab", "http://lab:8000", "profile lab")
    assert "ck-secret-123" not in json.dumps(shown)
    assert run(["config", "set", "colour", "red"], monkeypatch, tmp_path) == 2


def test_fncall_cases_compare_as_a_judge_and_a_wrong_answer_shows_both(monkeypatch, tmp_path, capsys):
    """issue 34: `--case '1 2=>3'` was compared exactly (a correct program printing `3\\n`
    got wrong_answer) and a wrong answer did not show what was expected."""
    import corral

    sent = {}

    def judged(runtime, code, **kwargs):
        sent.update(kwargs)
        return {"verdict": "wrong_answer", "cases": [{"verdict": "wrong_answer", "exit_code": 0, "stdout": "4\n"}]}

    monkeypatch.setattr(corral, "fncall", judged)
    program = tmp_path / "add.py"
    program.write_text("a, b = map(int, input().split())\nprint(a + b + 1)\n")
    assert run(["--api-key", "k", "fncall", "run", str(program), "--runtime", "python", "--case", "1 2=>3"],
               monkeypatch, tmp_path) == 5
    assert sent["compare"] == "tokens" and sent["tests"] == [{"stdin": "1 2\n", "expected_stdout": "3"}]
    out = capsys.readouterr().out
    assert 'expected: "3"' in out and 'got:      "4\\n"' in out
