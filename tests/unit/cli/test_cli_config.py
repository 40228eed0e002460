"""Where the CLI's url and key come from: flag > env > profile > default; the file is 0600."""

import stat

import pytest

from corral.cli import config


def test_flags_win_over_env_and_env_over_the_profile():
    data = {"current": "prod", "profiles": {"prod": {"url": "http://prod", "api_key": "pk"}}}
    env = {"CORRAL_URL": "http://env", "CORRAL_API_KEY": "ek"}
    flagged = config.resolve(data, url="http://flag/", api_key="fk", env=env)
    assert (flagged.url, flagged.api_key, flagged.profile) == ("http://flag", "fk", "prod")
    resolved = config.resolve(data, env=env)
    assert (resolved.url, resolved.api_key, resolved.source) == ("http://env", "ek", {"url": "env", "api_key": "env"})
    resolved = config.resolve(data, env={})
    assert (resolved.url, resolved.api_key) == ("http://prod", "pk")
    assert resolved.source == {"url": "profile prod", "api_key": "profile prod"}


def test_profile_choice_flag_then_env_then_current_then_default():
    data = {"current": "a", "profiles": {"a": {"api_key": "ka"}, "b": {"api_key": "kb"}, "default": {"api_key": "kd"}}}
    assert config.resolve(data, profile="b", env={"CORRAL_PROFILE": "a"}).api_key == "kb"
    assert config.resolve(data, env={"CORRAL_PROFILE": "b"}).api_key == "kb"
    assert config.resolve(data, env={}).api_key == "ka"
    assert config.resolve({"profiles": data["profiles"]}, env={}).api_key == "kd"
    nothing = config.resolve({}, env={})
    assert (nothing.url, nothing.api_key, nothing.source["api_key"]) == ("http://127.0.0.1:8000", "", "unset")


def test_an_unknown_profile_named_on_the_command_line_is_an_error():
    with pytest.raises(config.ConfigError, match="no profile 'nope'"):
        config.resolve({"profiles": {}}, profile="nope", env={})


def test_config_path_from_env(tmp_path):
    assert config.config_path({"CORRAL_CONFIG": str(tmp_path / "c.toml")}) == tmp_path / "c.toml"
    assert config.config_path({"XDG_CONFIG_HOME": str(tmp_path)}) == tmp_path / "corral" / "config.toml"


def test_save_writes_0600_and_round_trips_awkward_strings(tmp_path):
    path = tmp_path / "sub" / "config.toml"
    key = 'k"ey\\with\nodd\tchars é'
    data = config.set_profile({}, "my prof", url="http://x:1", api_key=key)
    config.save(path, data)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    loaded = config.load(path)
    assert loaded == {"current": "my prof", "profiles": {"my prof": {"url": "http://x:1", "api_key": key}}}
    # a second profile keeps the first, and only becomes current when asked
    config.save(path, config.set_profile(loaded, "other", api_key="k2"))
    again = config.load(path)
    assert again["current"] == "my prof" and set(again["profiles"]) == {"my prof", "other"}
    assert config.set_profile(again, "other", make_current=True)["current"] == "other"


def test_save_keeps_0600_over_a_world_readable_leftover(tmp_path):
    path = tmp_path / "config.toml"
    leftover = tmp_path / "config.toml.tmp"
    leftover.write_text("x")
    leftover.chmod(0o644)
    config.save(path, config.set_profile({}, "p", api_key="secret"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_broken_file_is_a_config_error_naming_it(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("profiles = [not toml")
    with pytest.raises(config.ConfigError, match="config.toml"):
        config.load(path)
    path.write_text('profiles = "a string"')
    with pytest.raises(config.ConfigError, match="profiles"):
        config.load(path)


def test_unknown_profile_settings_are_refused():
    with pytest.raises(config.ConfigError, match="unknown profile setting 'colour'"):
        config.set_profile({}, "p", colour="red")


def test_mask_never_shows_the_whole_key():
    assert config.mask("ck-1234567890") == "ck-1…90"
    assert "secret" not in config.mask("secret")
    assert config.mask("") == ""
