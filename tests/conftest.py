"""Service fixtures shared by every test: Redis and RabbitMQ.

Where a Docker engine answers (a developer's laptop) they come from testcontainers;
otherwise from locally installed servers: the ones `make test` started (CORRAL_TEST_REDIS_URL,
CORRAL_TEST_AMQP_URL), or private ones this session starts with scripts/servers.sh.
Each pytest-xdist worker gets its own Redis database and RabbitMQ vhost, so parallel
workers never see each other's nodes, sandboxes or queues.
"""

import os
import shutil
import subprocess
import tempfile
import urllib.parse
from pathlib import Path

import pytest

# The live platform's fixtures (tests/live_platform.py), registered here once so that tests/e2e
# and tests/security share one platform per test process.
from tests import ports
from tests.live_platform import platform, vm_platform  # noqa: F401 - fixtures

ROOT = Path(__file__).resolve().parent.parent

pytest_plugins = ["tests.exit_watchdog"]


def _worker_index() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(worker.removeprefix("gw") or 0)


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=2).ping()
        return True
    except Exception:  # noqa: BLE001 - any failure (no package, no socket, no answer) means no Docker
        return False


# Test Redis servers run with this many databases (scripts/servers.sh, the testcontainer): each
# namespace of isolated() (0 the in-process tests, 1 the live platform, 3 the fuzzed services...)
# takes one database per xdist worker.
REDIS_DATABASES = 64
WORKERS_PER_NAMESPACE = 8


@pytest.fixture(scope="session")
def service_urls(tmp_path_factory):
    redis_url = os.environ.get("CORRAL_TEST_REDIS_URL")
    amqp_url = os.environ.get("CORRAL_TEST_AMQP_URL")
    rabbit_home = os.environ.get("CORRAL_TEST_RABBITMQ_HOME")
    cleanup = []
    if not (redis_url and amqp_url):
        rabbit_home = None
        if _docker_answers():
            from testcontainers.rabbitmq import RabbitMqContainer
            from testcontainers.redis import RedisContainer

            redis_c = RedisContainer().with_command(f"redis-server --databases {REDIS_DATABASES}").start()
            rabbit_c = RabbitMqContainer().start()
            cleanup += [redis_c.stop, rabbit_c.stop]
            redis_url = f"redis://{redis_c.get_container_host_ip()}:{redis_c.get_exposed_port(6379)}/0"
            amqp_url = (f"amqp://guest:guest@{rabbit_c.get_container_host_ip()}:"
                        f"{rabbit_c.get_exposed_port(5672)}/")
        elif shutil.which("redis-server") and shutil.which("rabbitmq-server"):
            state = tempfile.mkdtemp(prefix="corral-servers-")
            out = subprocess.run([str(ROOT / "scripts/servers.sh"), "start", state, str(ports.SHARED_REDIS),
                                  str(ports.SHARED_AMQP)],
                                 check=True, capture_output=True, text=True).stdout.split()
            redis_url, amqp_url = out[-2], out[-1]
            rabbit_home = f"{state}/rabbitmq"
            cleanup.append(lambda: subprocess.run([str(ROOT / "scripts/servers.sh"), "stop", state], check=False))
        else:
            pytest.skip("needs Redis and RabbitMQ: a Docker engine, or redis-server and rabbitmq-server installed")
    index = _worker_index()

    def isolated(namespace: int, name: str) -> dict[str, str]:
        """URLs no other worker or namespace shares: a Redis database and a RabbitMQ vhost."""
        db = namespace * WORKERS_PER_NAMESPACE + index
        if namespace >= REDIS_DATABASES // WORKERS_PER_NAMESPACE or index >= WORKERS_PER_NAMESPACE:
            raise RuntimeError(f"no Redis database for namespace {namespace}, worker {index}: "
                               f"{REDIS_DATABASES} databases hold {WORKERS_PER_NAMESPACE} workers per namespace")
        urls = {"redis_url": redis_url.rsplit("/", 1)[0] + f"/{db}", "amqp_url": amqp_url}
        if rabbit_home:
            vhost = f"corral-{name}-{index}"
            _ensure_vhost(amqp_url, vhost, rabbit_home)
            urls["amqp_url"] = amqp_url.rstrip("/") + "/" + urllib.parse.quote(vhost, safe="")
        return urls

    yield {**isolated(0, "test"), "isolated": isolated}
    for stop in reversed(cleanup):
        stop()


def _ensure_vhost(amqp_url: str, vhost: str, rabbit_home: str) -> None:
    """Create a vhost with the broker's own CLI (AMQP cannot), on a broker scripts/servers.sh runs
    (its state dir holds rabbit_home).

    Brokers from testcontainers are private to this worker already and keep the default vhost.
    """
    ctl = [str(ROOT / "scripts/servers.sh"), "rabbitmqctl", str(Path(rabbit_home).parent), "-q"]
    subprocess.run([*ctl, "add_vhost", vhost], capture_output=True)
    subprocess.run([*ctl, "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"], check=True, capture_output=True)


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory):
    """A PostgreSQL server URL (SQLAlchemy form); tests make their own database or schema in it."""
    url = os.environ.get("CORRAL_TEST_POSTGRES_URL")
    if url:
        yield url
        return
    if _docker_answers():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:16", driver="psycopg") as pg:
            yield pg.get_connection_url()
        return
    if not Path("/usr/lib/postgresql").exists() or os.geteuid() != 0:
        pytest.skip("needs PostgreSQL: a Docker engine, CORRAL_TEST_POSTGRES_URL, or the postgresql package (as root)")
    state = tempfile.mkdtemp(prefix="corral-pg-")
    os.chmod(state, 0o755)
    port = str(ports.SHARED_POSTGRES)
    out = subprocess.run([str(ROOT / "scripts/servers.sh"), "start-postgres", state, port],
                         check=True, capture_output=True, text=True).stdout.split()
    yield out[-1]
    subprocess.run([str(ROOT / "scripts/servers.sh"), "stop", state], check=False)


@pytest.fixture
def redis_url(service_urls):
    """A Redis URL whose database is empty at the start of the test."""
    import redis

    client = redis.Redis.from_url(service_urls["redis_url"])
    client.flushdb()
    client.close()
    return service_urls["redis_url"]


@pytest.fixture
def amqp_url(service_urls):
    return service_urls["amqp_url"]
