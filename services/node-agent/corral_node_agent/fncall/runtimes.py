"""fncall runtimes: an environment (a root filesystem) plus a language spec.

Every runtime here runs on the ``judge`` base (Debian bookworm + python3, gcc, g++; see
corral_image_service.builders.judge). ``source`` is the file the code is written to in the
fresh working dir; ``compile`` (if any) produces ``main`` from it once per call; ``run`` is
executed once per test case. The names, and which of them compile, are the contract's
(``corral_common.contracts.fncall.RUNTIMES`` / ``COMPILED``): the api accepts calls for those.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Runtime:
    name: str
    source: str
    run: tuple[str, ...]
    compile: tuple[str, ...] | None = None
    environment: str = "judge"


RUNTIME_SPECS: dict[str, Runtime] = {
    "python": Runtime("python", "main.py", ("/usr/bin/python3", "-E", "-s", "main.py")),
    "cpp": Runtime("cpp", "main.cpp", ("./main",),
                   ("/usr/bin/g++", "-O2", "-std=c++17", "-pipe", "-o", "main", "main.cpp")),
    "c": Runtime("c", "main.c", ("./main",),
                 ("/usr/bin/gcc", "-O2", "-std=gnu11", "-pipe", "-o", "main", "main.c", "-lm")),
    "bash": Runtime("bash", "main.sh", ("/bin/bash", "main.sh")),
}
