"""A shaped link for benchmarks: servers in a network namespace of ours, reached through a
veth pair whose two ends are rate-limited (tbf), plus a delay proxy for the round trip.

    with ShapedLink("1gbit", rtt_ms=0.5) as link:
        start a server with link.exec_prefix + [...], bound to link.remote_ip
        [url] = link.forward(port)   # 127.0.0.1:<p> on our side, delayed, through the veth

This kernel has no netem (nor fq, so no EDT pacing either): the delay is added by a small
proxy process in our namespace (one thread per direction and connection, each segment sent
``rtt/2`` after it was received, so a stream keeps its rate while every request-response pays
the round trip). Its own hops and late wake-ups add to what it sleeps, so ``forward``
measures the round trip against an echo server across the veth and corrects the delay
(``measured_rtt_ms``). The proxy's CPU is counted with the servers'. Everything is made for
the run and deleted after it: the namespace (and with it both veth ends) and the proxy.

Its processes: ``python bench/shaped_link.py proxy --delay-ms D LISTEN_PORT=HOST:PORT ...``
and ``python bench/shaped_link.py echo HOST PORT``.
"""

import argparse
import ctypes
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections import deque

_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9}


def parse_link(spec: str) -> tuple[str, float]:
    """``1gbit:0.5ms`` -> ("1gbit", 0.5): a tc rate and a round-trip time in ms."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit):(\d+(?:\.\d+)?)ms", spec.strip().lower())
    if not m:
        raise argparse.ArgumentTypeError(f"--link wants RATE:RTT like 1gbit:0.5ms, not {spec!r}")
    return f"{m.group(1)}{m.group(2)}", float(m.group(3))


def _rate_bits(rate: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit)", rate)
    return float(m.group(1)) * _UNITS[m.group(2)]


def _run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


class ShapedLink:
    def __init__(self, rate: str, rtt_ms: float):
        self.rate, self.rtt_ms = rate, rtt_ms
        n = os.getpid() % 250 + 1
        self.ns = f"corral-bench-link-{os.getpid()}"
        self.host_if, self.ns_if = f"cbl{os.getpid()}h", f"cbl{os.getpid()}n"
        self.local_ip, self.remote_ip = f"10.213.{n}.1", f"10.213.{n}.2"
        self.exec_prefix = ["ip", "netns", "exec", self.ns]
        self.proxy: subprocess.Popen | None = None
        self.measured_rtt_ms = self.proxy_delay_ms = 0.0

    def __enter__(self) -> "ShapedLink":
        self.open()
        return self

    def open(self) -> None:
        try:
            self._up()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc) -> None:
        self.close()

    def _up(self) -> None:
        _run("ip", "netns", "add", self.ns)
        _run("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if, "netns", self.ns)
        _run("ip", "addr", "add", f"{self.local_ip}/30", "dev", self.host_if)
        _run("ip", "link", "set", self.host_if, "up")
        _run(*self.exec_prefix, "ip", "addr", "add", f"{self.remote_ip}/30", "dev", self.ns_if)
        _run(*self.exec_prefix, "ip", "link", "set", self.ns_if, "up")
        _run(*self.exec_prefix, "ip", "link", "set", "lo", "up")
        # A bucket of 1 ms at the rate (at least two 64 KiB GSO segments): shaping, not drops.
        burst = max(128 * 1024, int(_rate_bits(self.rate) / 8 / 1000))
        for prefix, dev in (([], self.host_if), (self.exec_prefix, self.ns_if)):
            _run(*prefix, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", self.rate,
                 "burst", str(burst), "latency", "50ms")

    def forward(self, *ports: int) -> list[str]:
        """URLs on our side for ``remote_ip:port`` each, through one delay proxy (call once).

        The proxy's own hops and late wake-ups add to the delay it sleeps: it is started once,
        the round trip through it measured against an echo server across the veth, and
        restarted with its delay corrected by the excess; ``measured_rtt_ms`` is the result."""
        local = [_free_port() for _ in range(len(ports) + 1)]
        echo = subprocess.Popen([*self.exec_prefix, sys.executable, __file__, "echo", self.remote_ip, str(_ECHO_PORT)],
                                stdout=subprocess.PIPE, text=True)
        try:
            if echo.stdout.readline().strip() != "ready":
                raise RuntimeError("echo server did not start")
            maps = [f"{lp}={self.remote_ip}:{rp}" for lp, rp in zip(local, [*ports, _ECHO_PORT], strict=True)]
            delay = self.rtt_ms / 2
            for _ in range(2):
                self._start_proxy(delay, maps)
                self.measured_rtt_ms = _ping(local[-1])
                delay = max(0.0, delay - (self.measured_rtt_ms - self.rtt_ms) / 2)
            self._start_proxy(delay, maps)
            self.measured_rtt_ms = _ping(local[-1])
            self.proxy_delay_ms = delay
        finally:
            echo.kill()
            echo.wait()
        return [f"http://127.0.0.1:{lp}" for lp in local[:-1]]

    def _start_proxy(self, delay_ms: float, maps: list[str]) -> None:
        if self.proxy is not None:
            self.proxy.kill()
            self.proxy.wait()
        self.proxy = subprocess.Popen([sys.executable, __file__, "proxy", "--delay-ms", str(delay_ms), *maps],
                                      stdout=subprocess.PIPE, text=True)
        if self.proxy.stdout.readline().strip() != "ready":
            raise RuntimeError("delay proxy did not start")

    def close(self) -> None:
        if self.proxy is not None:
            self.proxy.terminate()
            try:
                self.proxy.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proxy.kill()
            self.proxy = None
        # Deleting the namespace deletes the veth end in it, and its peer with it.
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True)


_ECHO_PORT = 18779


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ping(port: int, n: int = 300) -> float:
    """Median round trip in ms of one byte through 127.0.0.1:port to the echo server."""
    with socket.create_connection(("127.0.0.1", port)) as c:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            c.sendall(b"x")
            c.recv(1)
            times.append(time.perf_counter() - t0)
    return round(sorted(times)[n // 2] * 1000, 3)


def echo_main(host: str, port: int) -> None:
    listener = socket.create_server((host, port))
    print("ready", flush=True)
    while True:
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while data := conn.recv(4096):
            conn.sendall(data)
        conn.close()


# ---- the delay proxy (its own process) ----------------------------------------------------


def _pump(src: socket.socket, dst: socket.socket, delay_s: float) -> None:
    queue: deque = deque()
    ready = threading.Condition()

    def receive() -> None:
        try:
            while data := src.recv(256 * 1024):
                with ready:
                    queue.append((time.monotonic() + delay_s, data))
                    ready.notify()
        except OSError:
            pass
        with ready:
            queue.append((0.0, None))
            ready.notify()

    def send() -> None:
        while True:
            with ready:
                while not queue:
                    ready.wait()
                due, data = queue.popleft()
            if data is None:
                break
            left = due - time.monotonic()
            if left > 0:
                time.sleep(left)
            try:
                dst.sendall(data)
            except OSError:
                break
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    threading.Thread(target=receive, daemon=True).start()
    threading.Thread(target=send, daemon=True).start()


def _serve(listen_port: int, target: tuple[str, int], delay_s: float) -> socket.socket:
    listener = socket.create_server(("127.0.0.1", listen_port), backlog=128)

    def accept() -> None:
        while True:
            client, _ = listener.accept()
            try:
                upstream = socket.create_connection(target, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            _pump(client, upstream, delay_s)
            _pump(upstream, client, delay_s)

    threading.Thread(target=accept, daemon=True).start()
    return listener


def proxy_main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="shaped_link.py proxy")
    ap.add_argument("--delay-ms", type=float, required=True, help="added to each direction")
    ap.add_argument("maps", nargs="+", help="LISTEN_PORT=HOST:PORT")
    args = ap.parse_args(argv)
    # Timer slack 1 ns (default 50 µs): a 250 µs sleep then wakes close to when it should.
    ctypes.CDLL(None).prctl(29, 1, 0, 0, 0)  # PR_SET_TIMERSLACK
    for m in args.maps:
        lp, target = m.split("=")
        host, port = target.rsplit(":", 1)
        _serve(int(lp), (host, int(port)), args.delay_ms / 1000)
    print("ready", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    if sys.argv[1:2] == ["proxy"]:
        proxy_main(sys.argv[2:])
    elif sys.argv[1:2] == ["echo"]:
        echo_main(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(__doc__)
