"""fncall runtimes: an environment (a root filesystem) plus a language spec.

Every runtime here runs on the ``judge`` base (Debian bookworm plus each language's Debian
toolchain; see corral_image_service.builders.judge). ``source`` is the file the code is written
to in the fresh working dir; ``compile`` (if any) produces ``output`` from it once per call (in
the compile's own sandbox, with the compile limits); ``run`` is executed once per test case.
The names, and which of them compile, are the contract's (``corral_common.contracts.fncall.
RUNTIMES`` / ``COMPILED``): the api accepts calls for those. A node serves a runtime only if its
judge tree has the runtime's programs (``missing_tools``): an older tree serves fewer.
"""

from dataclasses import dataclass
from pathlib import Path

# Compiler caches go to the compile's private /tmp, not to the working dir (whose every file
# is copied into each run).
_GO = ("/usr/bin/env", "GOCACHE=/tmp/gocache", "GOPATH=/tmp/gopath", "CGO_ENABLED=0", "GO111MODULE=off",
       "/usr/bin/go", "build", "-o", "main", "main.go")
# The JVM sizes its heap from the run's memory cgroup; one GC thread and the C1 compiler only keep
# start-up quick and the thread count under the pids limit.
_JVM = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:CICompilerCount=1", "-Xshare:auto")
# tsc emits JavaScript even for code with type errors (as SandboxFusion's TypeScript runs
# type-unchecked code); only code it cannot emit is a compile error.
# TypeScript is transpiled without type checking (as SandboxFusion's TypeScript runs code with
# type errors): typescript's transpileModule, ~1 s, where a full tsc run takes ~14 s here. Only
# syntax errors fail the compile.
_TS_TRANSPILE = """
const ts = require("typescript"), fs = require("fs");
const out = ts.transpileModule(fs.readFileSync("main.ts", "utf8"), {reportDiagnostics: true, fileName: "main.ts",
  compilerOptions: {target: ts.ScriptTarget.ES2020, module: ts.ModuleKind.CommonJS}});
const errors = (out.diagnostics || []).filter(d => d.category === ts.DiagnosticCategory.Error);
for (const d of errors) {
  const pos = d.file ? d.file.getLineAndCharacterOfPosition(d.start) : null;
  console.error((pos ? `main.ts(${pos.line + 1},${pos.character + 1}): ` : "") + "error TS" + d.code + ": " +
                ts.flattenDiagnosticMessageText(d.messageText, "\\n"));
}
if (errors.length) process.exit(1);
fs.writeFileSync("main.js", out.outputText);
"""
_TSC = ("/usr/bin/node", "-e", _TS_TRANSPILE)


@dataclass(frozen=True)
class Runtime:
    name: str
    source: str
    run: tuple[str, ...]
    compile: tuple[str, ...] | None = None
    environment: str = "judge"
    output: str = "main"  # what compile must produce (else compile_error)
    needs: tuple[str, ...] = ()  # further paths the tree must have (a library the compile loads)

    def tools(self) -> list[str]:
        """The absolute programs it runs (through /usr/bin/env or /bin/sh -c: the program they start)."""
        found = []
        for argv in (self.run, self.compile or ()):
            if not argv:
                continue
            if argv[0] == "/usr/bin/env":
                found += [a for a in argv[1:] if a.startswith("/")][:1]
            elif argv[0] == "/bin/sh" and len(argv) > 2:
                found += [w for w in argv[2].split() if w.startswith("/usr/")][:1]
            elif argv[0].startswith("/"):
                found.append(argv[0])
        return found + list(self.needs)

    def missing_tools(self, rootfs: Path) -> list[str]:
        return [tool for tool in self.tools() if not _exists_in(rootfs, tool)]


def _exists_in(root: Path, path: str, hops: int = 40) -> bool:
    """Whether ``path`` exists inside ``root``, absolute symlinks (Debian's /etc/alternatives)
    resolved against ``root``, never against the host."""
    current = path
    for _ in range(hops):
        candidate = root / current.lstrip("/")
        if not candidate.is_symlink():
            return candidate.exists()
        target = Path(candidate.readlink())
        current = str(target if target.is_absolute() else Path(current).parent / target)
    return False


RUNTIME_SPECS: dict[str, Runtime] = {
    "python": Runtime("python", "main.py", ("/usr/bin/python3", "-E", "-s", "main.py")),
    "cpp": Runtime("cpp", "main.cpp", ("./main",),
                   ("/usr/bin/g++", "-O2", "-std=c++17", "-pipe", "-o", "main", "main.cpp")),
    "c": Runtime("c", "main.c", ("./main",),
                 ("/usr/bin/gcc", "-O2", "-std=gnu11", "-pipe", "-o", "main", "main.c", "-lm")),
    "bash": Runtime("bash", "main.sh", ("/bin/bash", "main.sh")),
    "pytest": Runtime("pytest", "test_main.py", ("/usr/bin/env", "PYTHONDONTWRITEBYTECODE=1", "/usr/bin/python3", "-m",
                                                 "pytest", "-q", "-p", "no:cacheprovider", "test_main.py")),
    "go": Runtime("go", "main.go", ("./main",), _GO),
    "java": Runtime("java", "Main.java", ("/usr/bin/java", *_JVM, "-cp", ".", "Main"),
                    ("/usr/bin/javac", *(f"-J{o}" for o in _JVM), "-encoding", "UTF-8", "Main.java"),
                    output="Main.class"),
    "nodejs": Runtime("nodejs", "main.js", ("/usr/bin/node", "main.js")),
    "typescript": Runtime("typescript", "main.ts", ("/usr/bin/node", "main.js"), _TSC, output="main.js",
                          needs=("/usr/share/nodejs/typescript/package.json",)),
    "rust": Runtime("rust", "main.rs", ("./main",),
                    ("/usr/bin/rustc", "--edition", "2021", "-O", "-C", "codegen-units=4", "-o", "main", "main.rs")),
    "ruby": Runtime("ruby", "main.rb", ("/usr/bin/ruby", "main.rb")),
    "php": Runtime("php", "main.php", ("/usr/bin/php", "main.php")),
    "lua": Runtime("lua", "main.lua", ("/usr/bin/lua5.4", "main.lua")),
    "perl": Runtime("perl", "main.pl", ("/usr/bin/perl", "main.pl")),
}
