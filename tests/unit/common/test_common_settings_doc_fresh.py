"""docs/configuration.md's env-var tables must match the settings models."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_settings_doc_is_up_to_date():
    result = subprocess.run([sys.executable, str(ROOT / "scripts/generate_settings_doc.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr + result.stdout
