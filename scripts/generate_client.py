"""Regenerate the SDK's low-level client from the api's OpenAPI document.

    python scripts/generate_client.py          # rewrite clients/python/corral_client
    python scripts/generate_client.py --check  # exit 1 if the checked-in client is stale
"""

import argparse
import filecmp
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "clients/python/corral_client"
OPENAPI = ROOT / "clients/python/openapi.json"


def openapi_document() -> dict:
    from corral_api.app import create_app

    return create_app().openapi()


def generate(out_dir: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "openapi.json"
        spec.write_text(json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n")
        config = Path(tmp) / "config.yml"
        config.write_text("project_name_override: corral_client\npackage_name_override: corral_client\n")
        gen_out = Path(tmp) / "gen"
        env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
        subprocess.run([sys.executable, "-m", "openapi_python_client", "generate", "--path", str(spec),
                        "--meta", "none", "--config", str(config), "--output-path", str(gen_out)],
                       check=True, env=env, capture_output=True)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        shutil.copytree(gen_out, out_dir, ignore=shutil.ignore_patterns(".ruff_cache", "__pycache__"))
        shutil.copy(spec, out_dir.parent / "openapi.json")


def same_tree(a: Path, b: Path) -> bool:
    cmp = filecmp.dircmp(a, b, ignore=["__pycache__", ".ruff_cache"])
    if cmp.left_only or cmp.right_only or cmp.diff_files:
        return False
    return all(same_tree(a / d, b / d) for d in cmp.common_dirs)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    if not args.check:
        generate(TARGET)
        print(f"regenerated {TARGET.relative_to(ROOT)}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "corral_client"
        saved_spec = OPENAPI.read_text() if OPENAPI.exists() else ""
        generate(fresh)
        fresh_spec = (Path(tmp) / "openapi.json").read_text()
        if not TARGET.exists() or not same_tree(fresh, TARGET) or fresh_spec != saved_spec:
            print("clients/python/corral_client is stale: run `make client`", file=sys.stderr)
            return 1
    print("client is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
