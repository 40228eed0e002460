"""The checked-in generated client must match the api's current OpenAPI document."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_generated_client_is_up_to_date():
    result = subprocess.run([sys.executable, str(ROOT / "scripts/generate_client.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr + result.stdout
