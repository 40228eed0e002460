"""Operator CLI.

    python -m corral_image_service.cli build-base {busybox|debian} --name NAME --version V \
        [--environment ENV] [--url http://127.0.0.1:8002] [--work-dir DIR] [--rebuild]

Builds the root filesystem on this machine, registers it through the HTTP API with
``source_dir`` (so the service must run on the same host and allow it), then creates the
environment ENV (default NAME) with that base. Re-running is safe: identical content gives
200s; a different tree under an existing name:version is a 409.
"""

import argparse
import json
import sys
from pathlib import Path

import httpx

from corral_common.web.internal import INTERNAL_TOKEN_HEADER
from corral_image_service.builders import BUILDERS
from corral_image_service.settings import ImageServiceSettings


def _check(resp: httpx.Response, what: str) -> dict:
    if resp.status_code in (200, 201):
        return resp.json()
    try:
        err = resp.json().get("error", {})
        msg = f"{err.get('code')}: {err.get('message')}"
    except ValueError:
        msg = resp.text
    raise SystemExit(f"{what} failed with HTTP {resp.status_code}: {msg}")


def build_base(args: argparse.Namespace, client: httpx.Client | None = None) -> dict:
    settings = ImageServiceSettings()
    work = Path(args.work_dir or Path(settings.data_dir) / "builders")
    out = work / args.flavor / "rootfs"
    print(f"building {args.flavor} rootfs in {out}", file=sys.stderr)
    root = BUILDERS[args.flavor](out, rebuild=args.rebuild, mirror=args.mirror, suite=args.suite)

    own = client is None
    # mkfs of a ~200 MB tree takes seconds; no read timeout. The service wants the internal
    # token (CORRAL_INTERNAL_TOKEN) on every call.
    headers = {INTERNAL_TOKEN_HEADER: settings.internal_token} if settings.internal_token else {}
    client = client or httpx.Client(base_url=args.url or settings.image_service_url, headers=headers,
                                    timeout=httpx.Timeout(10.0, read=None))
    try:
        layer = _check(client.post("/v1/layers", params={"kind": "base", "name": args.name,
                                                         "version": args.version,
                                                         "source_dir": str(root.resolve())}), "layer upload")
        env = _check(client.post("/v1/environments", json={"name": args.environment or args.name,
                                                           "base": layer["ref"]}), "environment")
    finally:
        if own:
            client.close()
    return {"layer": layer, "environment": env}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m corral_image_service.cli")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build-base", help="build a default base rootfs and register it")
    b.add_argument("flavor", choices=sorted(BUILDERS))
    b.add_argument("--name", required=True)
    b.add_argument("--version", required=True)
    b.add_argument("--environment", help="environment name (default: --name)")
    b.add_argument("--url", help="image-service URL (default: CORRAL_IMAGE_SERVICE_URL or http://127.0.0.1:8002)")
    b.add_argument("--work-dir", help="where rootfs trees are built/cached (default: <data_dir>/builders)")
    b.add_argument("--rebuild", action="store_true", help="debian: ignore the cached debootstrap tree")
    b.add_argument("--mirror", default="http://deb.debian.org/debian")
    b.add_argument("--suite", default="bookworm")
    return p


def main(argv: list[str] | None = None, client: httpx.Client | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "build-base":
        print(json.dumps(build_base(args, client), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
