"""Where the CLI's url and API key come from, in this order (first that says wins):

1. ``--url`` / ``--api-key``;
2. ``CORRAL_URL`` / ``CORRAL_API_KEY``;
3. the profile (``--profile``, else ``CORRAL_PROFILE``, else the file's ``current``, else
   ``default``) in the config file: ``$CORRAL_CONFIG``, else ``$XDG_CONFIG_HOME/corral/config.toml``
   (``~/.config/corral/config.toml``)::

       current = "prod"

       [profiles.prod]
       url = "https://corral.example.org"
       api_key = "ck-..."

The file holds keys, so it is written with mode 0600 (its directory 0700).
"""

import json
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral._common import DEFAULT_URL

PROFILE_KEYS = ("url", "api_key")


class ConfigError(Exception):
    """The config file cannot be read or says something the CLI does not accept."""


@dataclass(frozen=True)
class Resolved:
    url: str
    api_key: str
    profile: str
    source: dict[str, str]  # field -> where it came from ("flag", "env", "profile <name>", "default")


def config_path(env: dict[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get("CORRAL_CONFIG"):
        return Path(env["CORRAL_CONFIG"])
    base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else Path.home() / ".config"
    return base / "corral" / "config.toml"


def load(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    profiles = data.get("profiles", {})
    if not isinstance(profiles, dict) or not all(isinstance(p, dict) for p in profiles.values()):
        raise ConfigError(f"{path}: [profiles.<name>] tables expected")
    return data


def resolve(data: dict[str, Any], *, url: str | None = None, api_key: str | None = None,
            profile: str | None = None, env: dict[str, str] | None = None) -> Resolved:
    env = os.environ if env is None else env
    name = profile or env.get("CORRAL_PROFILE") or data.get("current") or "default"
    profiles = data.get("profiles", {})
    if profile and profile not in profiles:
        raise ConfigError(f"no profile {profile!r} in the config file (corral login --profile {profile} makes it)")
    chosen = profiles.get(name, {})
    values, source = {}, {}
    for field, flag, var in (("url", url, "CORRAL_URL"), ("api_key", api_key, "CORRAL_API_KEY")):
        if flag:
            values[field], source[field] = flag, "flag"
        elif env.get(var):
            values[field], source[field] = env[var], "env"
        elif chosen.get(field):
            values[field], source[field] = str(chosen[field]), f"profile {name}"
        else:
            values[field], source[field] = (DEFAULT_URL, "default") if field == "url" else ("", "unset")
    return Resolved(values["url"].rstrip("/"), values["api_key"], name, source)


def _toml_string(value: str) -> str:
    # A JSON string is a valid TOML basic string for everything json.dumps emits (\uXXXX escapes included).
    return json.dumps(value)


def dumps(data: dict[str, Any]) -> str:
    """The config as TOML: ``current`` and one ``[profiles.<name>]`` table of strings each."""
    lines = []
    if data.get("current"):
        lines += [f"current = {_toml_string(data['current'])}", ""]
    for name, profile in sorted(data.get("profiles", {}).items()):
        lines.append(f"[profiles.{_toml_string(name)}]")
        lines += [f"{key} = {_toml_string(str(profile[key]))}" for key in PROFILE_KEYS if profile.get(key)]
        lines.append("")
    return "\n".join(lines)


def save(path: Path, data: dict[str, Any]) -> None:
    """Write atomically with 0600 from the start (the key is never readable by others, not even briefly)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(dumps(data))
    os.chmod(tmp, 0o600)  # an existing .tmp kept its mode through O_CREAT
    os.replace(tmp, path)


def set_profile(data: dict[str, Any], name: str, *, make_current: bool = False, **fields: str | None) -> dict[str, Any]:
    """A copy of ``data`` with ``fields`` (url, api_key) set on profile ``name``."""
    unknown = set(fields) - set(PROFILE_KEYS)
    if unknown:
        raise ConfigError(f"unknown profile setting {sorted(unknown)[0]!r} (one of {', '.join(PROFILE_KEYS)})")
    profiles = {k: dict(v) for k, v in data.get("profiles", {}).items()}
    profile = profiles.setdefault(name, {})
    profile.update({k: v for k, v in fields.items() if v})
    out = {**data, "profiles": profiles}
    if make_current or not data.get("current"):
        out["current"] = name
    return out


def mask(key: str) -> str:
    return key[:4] + "…" + key[-2:] if len(key) > 8 else "…" if key else ""
