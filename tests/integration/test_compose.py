"""docker-compose.yml validates and describes every Corral service.

`docker-compose config -q` (compose v1, Debian's docker-compose package) runs only where the
binary exists; the structural checks read the YAML directly and always run.
"""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"


def _service_packages() -> dict[str, str]:
    """services/<dir> → its importable package (corral_*), for every service under services/."""
    found = {}
    for pyproject in sorted((ROOT / "services").glob("*/pyproject.toml")):
        pkgs = [p.name for p in pyproject.parent.glob("corral_*") if (p / "__init__.py").is_file()]
        assert len(pkgs) == 1, f"{pyproject.parent}: expected one corral_* package, found {pkgs}"
        found[pyproject.parent.name] = pkgs[0]
    return found


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def test_compose_config_validates():
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose binary not installed (apt-get install docker-compose)")
    r = subprocess.run([binary, "-f", str(COMPOSE), "config", "-q"], cwd=ROOT, capture_output=True, text=True,
                       check=False, timeout=60)
    assert r.returncode == 0, r.stderr


def test_every_service_package_is_deployed(compose):
    packages = _service_packages()
    assert set(packages) >= {"api", "scheduler", "node-agent", "image-service", "memory-manager"}
    services = compose["services"]
    for name, package in packages.items():
        assert name in services, f"services/{name} has no compose service"
        assert services[name]["command"] == ["python", "-m", package]
        assert (ROOT / "services" / name / package / "__main__.py").is_file(), f"{package} has no __main__"
        assert services[name]["build"]["dockerfile"] == "deploy/Dockerfile"
    assert (ROOT / "deploy/Dockerfile").is_file()


def test_backing_services_and_dependencies(compose):
    services = compose["services"]
    assert re.fullmatch(r"redis:7(\..*)?", services["redis"]["image"])
    assert services["rabbitmq"]["image"].startswith("rabbitmq:3")
    assert services["postgres"]["image"].startswith("postgres:16")
    assert services["postgres"]["environment"]["POSTGRES_DB"] == "corral"
    for name, svc in services.items():
        assert "healthcheck" in svc, f"{name} has no healthcheck"
        for dep, how in (svc.get("depends_on") or {}).items():
            assert dep in services, f"{name} depends on unknown {dep}"
            assert how == {"condition": "service_healthy"}, f"{name} → {dep}"
    node = services["node-agent"]
    assert node["privileged"] is True
    targets = {v.split(":")[1] for v in node["volumes"]}
    assert {"/var/lib/corral", "/sys/fs/cgroup"} <= targets


def test_bind_addresses_and_env(compose):
    env = {name: svc.get("environment", {}) for name, svc in compose["services"].items()}
    assert env["api"]["CORRAL_API_HOST"] == "0.0.0.0" and env["api"]["CORRAL_API_PORT"] == "8000"
    assert env["api"]["CORRAL_API_DATABASE_URL"].startswith("postgresql+psycopg://")
    assert env["scheduler"]["CORRAL_SCHEDULER_HOST"] == "0.0.0.0"
    assert env["image-service"]["CORRAL_IMAGE_HOST"] == "0.0.0.0"
    assert env["image-service"]["CORRAL_IMAGE_DATABASE_URL"].startswith("postgresql+psycopg://")
    assert env["memory-manager"]["CORRAL_MEMORY_MANAGER_HOST"] == "0.0.0.0"
    assert env["memory-manager"]["CORRAL_NODE_ID"] == env["node-agent"]["CORRAL_NODE_ID"]
    # The node-agent's host is also the URL it advertises to the api: it must be reachable.
    assert env["node-agent"]["CORRAL_NODE_HOST"] not in ("0.0.0.0", "127.0.0.1", "")
    for name in ("api", "scheduler", "image-service", "node-agent", "memory-manager"):
        for var in ("CORRAL_REDIS_URL", "CORRAL_AMQP_URL", "CORRAL_IMAGE_SERVICE_URL", "CORRAL_INTERNAL_TOKEN"):
            assert var in env[name], f"{name} lacks {var}"


def test_only_the_public_api_is_published_beyond_loopback(compose):
    """Redis, RabbitMQ (and its management UI), PostgreSQL and the internal services are
    reachable from the host's loopback at most; every Corral service carries the internal token."""
    for name, svc in compose["services"].items():
        for port in svc.get("ports") or []:
            spec = str(port)
            if name == "api":
                continue
            assert spec.startswith("127.0.0.1:"), f"{name} publishes {spec} beyond loopback"
        if name in ("redis", "rabbitmq", "postgres", "grafana"):  # third-party parts, not Corral services
            continue
        assert svc["environment"].get("CORRAL_INTERNAL_TOKEN"), f"{name} has no internal token"
    assert not compose["services"]["redis"].get("ports"), "Redis (no password) must not be published"


def test_redis_persists_on_its_volume(compose):
    """An append-only file fsynced every second, on a named volume: a restarted Redis
    container comes back with every sandbox record and job queue."""
    redis = compose["services"]["redis"]
    command = redis["command"]
    flags = dict(zip(command[1::2], command[2::2], strict=False))
    assert (flags["--appendonly"], flags["--appendfsync"]) == ("yes", "everysec")
    volume, target = redis["volumes"][0].split(":")[:2]
    assert target == "/data" and volume in compose["volumes"]


def test_observability_is_an_opt_in_profile_scraping_every_service(compose):
    """Prometheus and Grafana start only with `--profile observability`; Prometheus scrapes each
    Corral service at its compose name and port, the api with the internal token."""
    services = compose["services"]
    for name in ("prometheus", "grafana"):
        assert services[name]["profiles"] == ["observability"], name
    assert all("profiles" not in svc for name, svc in services.items() if name not in ("prometheus", "grafana"))
    scrape = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in scrape["scrape_configs"]}
    ports = {"api": "8000", "scheduler": "8001", "image-service": "8002", "node-agent": "8100", "memory-manager": "8003"}
    for name, port in ports.items():
        assert jobs[name]["static_configs"][0]["targets"] == [f"{name}:{port}"]
        assert port in str(services[name]["ports"])
    assert jobs["api"]["authorization"]["credentials_file"] in services["prometheus"]["entrypoint"][-1]
    assert "CORRAL_INTERNAL_TOKEN" in services["prometheus"]["environment"]
