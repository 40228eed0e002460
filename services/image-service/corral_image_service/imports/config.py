"""An OCI/Docker image config as the environment's ImageConfig (what its sandboxes start with)."""

from typing import Any

from corral_common.contracts.images import ImageConfig
from corral_common.web.errors import Unprocessable
from corral_image_service.imports.inroot import Root


def _ids(db: bytes | None) -> dict[str, tuple[int, int]]:
    """name -> (id, primary gid) from /etc/passwd (or id, id from /etc/group)."""
    out: dict[str, tuple[int, int]] = {}
    for line in (db or b"").decode(errors="replace").splitlines():
        fields = line.split(":")
        if len(fields) >= 4 and fields[2].isdigit():
            gid = int(fields[3]) if fields[3].isdigit() else int(fields[2])
            out.setdefault(fields[0], (int(fields[2]), gid))
        elif len(fields) >= 3 and fields[2].isdigit():
            out.setdefault(fields[0], (int(fields[2]), int(fields[2])))
    return out


def resolve_user(user: str, root: Root) -> str | None:
    """``User`` (``name``, ``uid``, ``name:group``, ``uid:gid``) as numeric ``uid:gid`` from the
    image's own /etc/passwd and /etc/group; None for "" (root)."""
    if not user:
        return None
    name, _, group = user.partition(":")
    passwd, groups = _ids(root.read_file("etc/passwd")), _ids(root.read_file("etc/group"))
    if name.isdigit():
        uid, gid = int(name), int(name)
        for entry_uid, entry_gid in passwd.values():
            if entry_uid == uid:
                gid = entry_gid
                break
    elif name in passwd:
        uid, gid = passwd[name]
    else:
        raise Unprocessable(f"image config User {user!r}: no user {name!r} in the image's /etc/passwd",
                            loc=["body", "config", "User"], code="unknown_image_user")
    if group:
        if group.isdigit():
            gid = int(group)
        elif group in groups:
            gid = groups[group][0]
        else:
            raise Unprocessable(f"image config User {user!r}: no group {group!r} in the image's /etc/group",
                                loc=["body", "config", "User"], code="unknown_image_user")
    if uid > 65535 or gid > 65535:
        raise Unprocessable(f"image config User {user!r}: ids above 65535 do not fit a sandbox's user namespace",
                            loc=["body", "config", "User"], code="unknown_image_user")
    return f"{uid}:{gid}"


def image_config(config: dict[str, Any], root: Root) -> ImageConfig:
    c = config.get("config") or config.get("container_config") or {}
    env: dict[str, str] = {}
    for item in c.get("Env") or []:
        if isinstance(item, str) and "=" in item:
            key, _, value = item.partition("=")
            env[key] = value

    def strings(value: Any) -> list[str]:
        return [str(v) for v in value] if isinstance(value, list) else []

    try:
        return ImageConfig(
            env=env, cwd=c.get("WorkingDir") or None, user=resolve_user(str(c.get("User") or ""), root),
            entrypoint=strings(c.get("Entrypoint")), cmd=strings(c.get("Cmd")),
            exposed_ports=sorted((c.get("ExposedPorts") or {}).keys()),
            labels={str(k): str(v) for k, v in (c.get("Labels") or {}).items()})
    except ValueError as exc:  # pydantic's: an Env with NUL, a relative WorkingDir...
        raise Unprocessable(f"image config not usable: {exc}", loc=["body", "config"], code="invalid_image_config") \
            from exc
