"""The lazy-layer server's FUSE side: the hand-written /dev/fuse server (``layers.lazy.lazyfs``)
against pyfuse3 (libfuse 3), on the same read workload (issue 16 part 4).

    python bench/lazy_fuse.py --mb 256 --runs 3 --json bench/results/lazy_fuse.json

One layer file of --mb MiB, served from memory (the chunk cache's hot path: the cost measured
is the FUSE side alone), read by another thread of the same process through a fresh mount
each run (cold page cache): sequentially in 1 MiB reads, and 4 KiB reads at random offsets
(O_DIRECT off; each 4 KiB read of a cold page is one FUSE READ, readahead aside). pyfuse3 is
run twice: its read handler answering directly (a lower bound: the real reader blocks on
chunk fetches, so it cannot run on trio's loop) and through ``trio.to_thread`` (what the
server would do). Floor: the same reads of a file in /dev/shm. Each implementation runs in a
subprocess of its own (pyfuse3 has one session per process), in a private mount namespace.
Needs root, /dev/fuse and ``pip install pyfuse3==3.5.0`` (builds against libfuse3-dev; not in
requirements-dev.txt: only this comparison uses it).
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

SEQ_BLOCK = 1 << 20
RAND_BLOCK = 4096
RAND_READS = 4000


def sequential(path: str, size: int, seed: int) -> dict[str, float]:
    fd = os.open(path, os.O_RDONLY)
    try:
        t0 = time.perf_counter()
        off = 0
        while off < size:
            n = len(os.pread(fd, SEQ_BLOCK, off))
            assert n > 0
            off += n
        seq = time.perf_counter() - t0
    finally:
        os.close(fd)
    return {"seq_s": seq, "seq_mib_s": size / seq / 2**20}


def random_reads(path: str, size: int, seed: int) -> dict[str, float]:
    rnd = random.Random(seed)
    offsets = [rnd.randrange(0, size // RAND_BLOCK) * RAND_BLOCK for _ in range(RAND_READS)]
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no readahead: one READ per cold page
    try:
        t0 = time.perf_counter()
        for off in offsets:
            os.pread(fd, RAND_BLOCK, off)
        dt = time.perf_counter() - t0
    finally:
        os.close(fd)
    return {"rand_us": dt / RAND_READS * 1e6}


# ---- the implementations (each in its own subprocess) -----------------------------------


def serve_handwritten(mnt: str, data: bytes, phase) -> dict:
    from corral_node_agent.layers.lazy.lazyfs import LazyFS

    fs = LazyFS(mnt, lambda f, off, n: data[off:off + n], workers=16)
    fs.start()
    try:
        fs.add("layer", len(data), None)
        return phase(f"{mnt}/layer")
    finally:
        fs.stop()


def serve_pyfuse3(mnt: str, data: bytes, phase, threaded: bool) -> dict:
    import errno
    import stat

    import pyfuse3
    import trio

    class Ops(pyfuse3.Operations):
        def _attr(self, ino):
            a = pyfuse3.EntryAttributes()
            a.st_ino = ino
            if ino == pyfuse3.ROOT_INODE:
                a.st_mode, a.st_size, a.st_nlink = stat.S_IFDIR | 0o555, 0, 2
            else:
                a.st_mode, a.st_size, a.st_nlink = stat.S_IFREG | 0o444, len(data), 1
            a.st_blksize = 4096
            a.st_blocks = (a.st_size + 511) // 512
            a.attr_timeout = a.entry_timeout = 86400
            return a

        async def getattr(self, inode, ctx=None):
            return self._attr(inode)

        async def lookup(self, parent, name, ctx=None):
            if parent != pyfuse3.ROOT_INODE or name != b"layer":
                raise pyfuse3.FUSEError(errno.ENOENT)
            return self._attr(2)

        async def open(self, inode, flags, ctx):
            return pyfuse3.FileInfo(fh=inode, keep_cache=True)

        async def read(self, fh, off, size):
            if threaded:
                return await trio.to_thread.run_sync(lambda: data[off:off + size])
            return data[off:off + size]

        async def opendir(self, inode, ctx):
            return inode

        async def readdir(self, fh, start_id, token):
            if start_id == 0:
                pyfuse3.readdir_reply(token, b"layer", self._attr(2), 1)

    options = set(pyfuse3.default_options) | {"allow_other", "ro"}
    pyfuse3.init(Ops(), mnt, options)
    result: dict = {}

    async def main():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pyfuse3.main)
            result.update(await trio.to_thread.run_sync(phase, f"{mnt}/layer"))
            pyfuse3.terminate()

    try:
        trio.run(main)
    finally:
        pyfuse3.close(unmount=True)
    return result


def serve_floor(mnt: str, data: bytes, phase) -> dict:
    path = f"/dev/shm/corral-bench-lazy-fuse-{os.getpid()}"
    with open(path, "wb") as fh:
        fh.write(data)
    try:
        return phase(path)
    finally:
        os.unlink(path)


def child(impl: str, mb: int, which: str, seed: int) -> None:
    from corral_host import namespaces

    namespaces.private_mount_namespace()  # single-threaded still; the mount vanishes with us
    data = os.urandom(mb << 20)  # content is irrelevant: the FUSE side is measured
    phase = (lambda p: sequential(p, len(data), seed)) if which == "seq" else (lambda p: random_reads(p, len(data), seed))
    with tempfile.TemporaryDirectory(prefix="corral-bench-fuse-") as mnt:
        if impl == "handwritten":
            out = serve_handwritten(mnt, data, phase)
        elif impl == "pyfuse3":
            out = serve_pyfuse3(mnt, data, phase, threaded=False)
        elif impl == "pyfuse3-thread":
            out = serve_pyfuse3(mnt, data, phase, threaded=True)
        else:
            out = serve_floor(mnt, data, phase)
    print(json.dumps(out))


def run_impl(impl: str, mb: int, which: str, seed: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", impl, "--mb", str(mb), "--which", which,
                          "--seed", str(seed)], capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"{impl} {which}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--child", default=None)
    ap.add_argument("--which", default="seq")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.mb, args.which, args.seed)
        return
    impls = ["floor", "handwritten", "pyfuse3", "pyfuse3-thread"]
    rows: dict[str, dict[str, list[float]]] = {i: {"seq_mib_s": [], "rand_us": []} for i in impls}
    for run in range(args.runs):
        for impl in impls:  # interleaved: a drifting machine disturbs all alike
            rows[impl]["seq_mib_s"].append(run_impl(impl, args.mb, "seq", run)["seq_mib_s"])
            rows[impl]["rand_us"].append(run_impl(impl, args.mb, "rand", run)["rand_us"])
    med = {i: {k: statistics.median(v) for k, v in r.items()} for i, r in rows.items()}
    print(f"{'impl':<16} {'seq MiB/s':>10} {'rand 4K µs':>11} {'seq vs hand':>12} {'rand vs hand':>13}")
    hand = med["handwritten"]
    for i in impls:
        m = med[i]
        print(f"{i:<16} {m['seq_mib_s']:>10.0f} {m['rand_us']:>11.1f} "
              f"{m['seq_mib_s'] / hand['seq_mib_s']:>11.2f}× {m['rand_us'] / hand['rand_us']:>12.2f}×")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"params": {"mb": args.mb, "runs": args.runs}, "runs": rows, "median": med}, fh, indent=2)


if __name__ == "__main__":
    main()
