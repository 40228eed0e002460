"""The platform's secret files (API key, internal token, platform.json holding both) are 0600,
from their first byte, and tightened where an older run left them 0644."""

import os
import stat
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "scripts"))

import corral_platform  # noqa: E402 - from scripts/


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_secrets_are_owner_only(tmp_path):
    old = os.umask(0o022)
    try:
        token = corral_platform._secret(tmp_path / "internal-token")
        assert len(token) >= 24 and mode(tmp_path / "internal-token") == 0o600
        assert corral_platform._secret(tmp_path / "internal-token") == token  # kept across runs
        loose = tmp_path / "api-key"
        loose.write_text("left-by-an-older-version")
        loose.chmod(0o644)
        assert corral_platform._secret(loose) == "left-by-an-older-version" and mode(loose) == 0o600
        info = tmp_path / "platform.json"
        info.write_text("{}")
        info.chmod(0o644)
        corral_platform.write_private(info, '{"api_key": "k"}')
        assert mode(info) == 0o600 and info.read_text() == '{"api_key": "k"}'
        corral_platform.write_private(tmp_path / "new.json", "{}")
        assert mode(tmp_path / "new.json") == 0o600
    finally:
        os.umask(old)


def test_make_up_creates_its_copy_0600_before_writing_it():
    recipe = (ROOT / "Makefile").read_text().split("\nup:", 1)[1].split("\n\n", 1)[0]
    install, run = recipe.index("install -m 600 /dev/null $(STATE).json"), recipe.index("> $(STATE).json")
    assert install < run
