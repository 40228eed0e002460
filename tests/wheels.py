"""A tiny pure-Python wheel built by hand (the format is a zip with a dist-info directory,
PEP 427), for tests that install a package from a local index."""

import base64
import hashlib
import zipfile
from pathlib import Path


def build_wheel(directory: Path, name: str = "corral_egress_probe", version: str = "1.0",
                value: str = "installed through the egress proxy") -> Path:
    dist = f"{name}-{version}"
    files = {
        f"{name}/__init__.py": f"VALUE = {value!r}\n",
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n",
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: corral-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{dist}.dist-info/RECORD,,")
    files[f"{dist}.dist-info/RECORD"] = "\n".join(record) + "\n"
    wheel = directory / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return wheel
