"""deploy/kubernetes: the manifests render, every object is valid Kubernetes, and they hang together.

Rendering: with kustomize where it is installed (`kustomize build`, or `kubectl kustomize` from
kubectl 1.21 on); everywhere, with the small renderer below, which knows only the kustomization
fields the manifests use (and fails on any other) and is checked against kustomize where both
run. Validation: every object against the Kubernetes OpenAPI schemas bundled by
kubernetes-validate (strict: unknown fields are errors), offline. Cross-references: every env
var is a real setting of the service that reads it (docs/configuration.md, generated from the
settings models), every Secret/ConfigMap/PVC/port/volume named exists, selectors match labels.
"""

import copy
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy/kubernetes"
BASE, OVERLAY = KUBE / "base", KUBE / "overlays/example"
# The oldest Kubernetes the manifests target and the newest whose schemas are bundled.
K8S_VERSIONS = ("1.28.0", None)
PACKAGES = {"corral_api": "api", "corral_scheduler": "scheduler", "corral_image_service": "image-service",
            "corral_node_agent": "node-agent", "corral_memory_manager": "memory-manager"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume", "StorageClass"}
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet"}


# ---- rendering ---------------------------------------------------------------------------


def _merge(target: dict, patch: dict, where: str) -> None:
    """A strategic-merge patch made only of maps (lists would need kustomize's merge keys)."""
    for key, value in patch.items():
        assert not isinstance(value, list), f"{where}.{key}: the built-in renderer patches maps only"
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value, f"{where}.{key}")
        else:
            target[key] = copy.deepcopy(value)


def _pod_containers(obj: dict) -> list[dict]:
    spec = obj.get("spec", {}).get("template", {}).get("spec", {})
    return spec.get("initContainers", []) + spec.get("containers", [])


def render(directory: Path) -> list[dict]:
    """`kustomize build directory` for the fields the manifests use."""
    k = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(k) - {"apiVersion", "kind", "resources", "namespace", "images", "replicas", "patches"}
    assert not unknown, f"{directory}: the built-in renderer does not know {sorted(unknown)}"
    objects: list[dict] = []
    for resource in k.get("resources", []):
        path = (directory / resource).resolve()
        objects += render(path) if path.is_dir() else [d for d in yaml.safe_load_all(path.read_text()) if d]
    for patch in k.get("patches", []):
        assert set(patch) == {"path"}, f"{directory}: only file patches ({patch})"
        for doc in yaml.safe_load_all((directory / patch["path"]).read_text()):
            targets = [o for o in objects if (o["kind"], o["metadata"]["name"]) == (doc["kind"], doc["metadata"]["name"])]
            assert len(targets) == 1, f"{patch['path']}: {doc['kind']}/{doc['metadata']['name']} matches {len(targets)}"
            _merge(targets[0], {key: v for key, v in doc.items() if key not in ("apiVersion", "kind")}, patch["path"])
    for image in k.get("images", []):
        for obj in objects:
            for container in _pod_containers(obj):
                if re.split(r"[:@]", container["image"])[0] == image["name"]:
                    container["image"] = f"{image.get('newName', image['name'])}:{image['newTag']}"
    for replicas in k.get("replicas", []):
        for obj in objects:
            if obj["kind"] in ("Deployment", "StatefulSet") and obj["metadata"]["name"] == replicas["name"]:
                obj["spec"]["replicas"] = replicas["count"]
    if "namespace" in k:
        for obj in objects:
            if obj["kind"] not in CLUSTER_SCOPED:
                obj["metadata"]["namespace"] = k["namespace"]
    return objects


def _kustomize() -> list[str] | None:
    """A real kustomize: the binary, or kubectl's (kubectl 1.21+ has kustomize v4+)."""
    if binary := shutil.which("kustomize"):
        return [binary, "build"]
    if kubectl := shutil.which("kubectl"):
        out = subprocess.run([kubectl, "version", "--client", "-o", "json"], capture_output=True, text=True,
                             check=False, timeout=30)
        try:
            version = json.loads(out.stdout).get("kustomizeVersion", "")
        except json.JSONDecodeError:
            version = ""
        if re.match(r"v[4-9]", version):
            return [kubectl, "kustomize"]
    return None


def _key(obj: dict) -> tuple[str, str, str, str]:
    meta = obj["metadata"]
    return obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"]


@pytest.fixture(scope="module", params=["base", "overlay"])
def objects(request) -> list[dict]:
    return render(BASE if request.param == "base" else OVERLAY)


@pytest.mark.parametrize("directory", [BASE, OVERLAY], ids=["base", "overlay"])
def test_kustomize_renders_what_the_built_in_renderer_does(directory):
    command = _kustomize()
    if command is None:
        pytest.skip("no kustomize (binary, or kubectl 1.21+) installed: the built-in renderer alone checks")
    out = subprocess.run([*command, str(directory)], capture_output=True, text=True, check=False, timeout=60)
    assert out.returncode == 0, out.stderr
    theirs = {_key(o): o for o in yaml.safe_load_all(out.stdout) if o}
    ours = {_key(o): o for o in render(directory)}
    assert sorted(theirs) == sorted(ours)
    for key, obj in ours.items():
        assert theirs[key] == obj, key


# ---- schemas -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", K8S_VERSIONS, ids=lambda v: v or "latest")
def test_every_object_is_valid_kubernetes(objects, version):
    import kubernetes_validate

    version = version or kubernetes_validate.latest_version()
    errors = []
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{obj['kind']}/{obj['metadata']['name']}: {exc.message} at {list(exc.path)}")
    assert not errors, "\n".join(errors)


def test_the_schema_check_catches_a_typo():
    """The validator is strict: a misspelt field fails (so the test above can fail)."""
    import kubernetes_validate

    api = copy.deepcopy(next(o for o in render(BASE) if o["kind"] == "Deployment" and o["metadata"]["name"] == "api"))
    api["spec"]["template"]["spec"]["containers"][0]["readinessProbes"] = {}
    with pytest.raises(kubernetes_validate.ValidationError, match="readinessProbes"):
        kubernetes_validate.validate(api, kubernetes_validate.latest_version(), strict=True)


# ---- cross-references ----------------------------------------------------------------------


def _setting_names() -> dict[str, set[str]]:
    """Env names each service reads, from docs/configuration.md (generated from the models and
    kept fresh by tests/unit/common/test_common_settings_doc_fresh.py)."""
    sections: dict[str, set[str]] = {}
    current = None
    for line in (ROOT / "docs/configuration.md").read_text().splitlines():
        if m := re.match(r"^## (.+?) \(`", line):
            current = sections.setdefault(m.group(1), set())
        elif current is not None and line.startswith("| `"):
            cells = line.split("|")
            current.update(re.findall(r"`([A-Z0-9_]+)`", cells[1] + cells[3]))
    shared = sections.pop("Every service")
    return {title: names | shared for title, names in sections.items()}


def _by_kind(objects: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def _corral_containers(objects: list[dict]):
    for obj in objects:
        if obj["kind"] in WORKLOADS:
            for container in _pod_containers(obj):
                if container.get("command", [])[:2] == ["python", "-m"]:
                    yield obj, container, PACKAGES[container["command"][2]]


def test_every_env_var_is_a_setting_of_the_service_that_reads_it(objects):
    settings = _setting_names()
    config = {name: set(cm.get("data", {})) for name, cm in _by_kind(objects, "ConfigMap").items()}
    seen = set()
    for obj, container, service in _corral_containers(objects):
        seen.add(service)
        where = f"{obj['metadata']['name']}/{container['name']}"
        names = [e["name"] for e in container.get("env", [])]
        for source in container.get("envFrom", []):
            names += sorted(config[source["configMapRef"]["name"]])
        expanded = {ref for e in container.get("env", []) for ref in re.findall(r"\$\((\w+)\)", e.get("value", ""))}
        for name in names:
            if name.startswith("CORRAL_"):
                assert name in settings[service], f"{where}: {name} is not a setting {service} reads"
            else:  # a helper variable: only there to be expanded into a setting's value
                assert name in expanded, f"{where}: {name} is neither a setting nor used in $({name})"
        for var in ("CORRAL_REDIS_URL", "CORRAL_AMQP_URL", "CORRAL_IMAGE_SERVICE_URL", "CORRAL_INTERNAL_TOKEN"):
            assert var in names, f"{where} lacks {var}"
    assert seen == set(PACKAGES.values())


def test_env_expansions_refer_to_variables_defined_before_them(objects):
    for obj in objects:
        for container in _pod_containers(obj):
            defined: set[str] = set()
            for env in container.get("env", []):
                for ref in re.findall(r"\$\((\w+)\)", env.get("value", "")):
                    assert ref in defined, f"{obj['metadata']['name']}/{container['name']}: $({ref}) before its definition"
                defined.add(env["name"])
            for arg in container.get("args", []) + container.get("command", []):
                for ref in re.findall(r"\$\((\w+)\)", arg):
                    assert ref in defined, f"{obj['metadata']['name']}/{container['name']}: $({ref}) undefined"


def test_every_secret_configmap_claim_volume_and_port_named_exists(objects):
    secrets = {name: set(s.get("stringData", {})) | set(s.get("data", {})) for name, s in _by_kind(objects, "Secret").items()}
    configmaps, claims = _by_kind(objects, "ConfigMap"), _by_kind(objects, "PersistentVolumeClaim")
    for obj in objects:
        if obj["kind"] not in WORKLOADS:
            continue
        spec = obj["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        volumes.update({t["metadata"]["name"]: t for t in obj["spec"].get("volumeClaimTemplates", [])})
        for volume in spec.get("volumes", []):
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in claims
        for container in _pod_containers(obj):
            where = f"{obj['metadata']['name']}/{container['name']}"
            for env in container.get("env", []):
                if ref := env.get("valueFrom", {}).get("secretKeyRef"):
                    assert ref["key"] in secrets.get(ref["name"], set()), f"{where}: secret {ref} missing"
            for source in container.get("envFrom", []):
                assert source["configMapRef"]["name"] in configmaps, where
            for mount in container.get("volumeMounts", []):
                assert mount["name"] in volumes, f"{where}: no volume {mount['name']}"
            ports = {p["name"] for p in container.get("ports", [])}
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                for handler in ("httpGet", "tcpSocket"):
                    port = container.get(probe, {}).get(handler, {}).get("port")
                    if isinstance(port, str):
                        assert port in ports, f"{where}: {probe} port {port}"


def _matches(selector: dict, labels: dict) -> bool:
    if not all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        assert expr["operator"] == "In", expr
        if labels.get(expr["key"]) not in expr["values"]:
            return False
    return True


def test_selectors_match_the_labels_of_the_pods_they_mean(objects):
    pods = [(o, o["spec"]["template"]["metadata"]["labels"]) for o in objects if o["kind"] in WORKLOADS]
    for obj, labels in pods:
        assert _matches(obj["spec"]["selector"], labels), f"{obj['metadata']['name']}: selector vs template labels"
    services = _by_kind(objects, "Service")
    for name, service in services.items():
        selected = [o for o, labels in pods if _matches({"matchLabels": service["spec"]["selector"]}, labels)]
        assert len(selected) == 1, f"Service {name} selects {len(selected)} workloads"
        ports = {p["name"] for c in _pod_containers(selected[0]) for p in c.get("ports", [])}
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ports, f"Service {name}: no container port {port['targetPort']}"
    for obj in objects:
        if obj["kind"] == "StatefulSet":
            assert services[obj["spec"]["serviceName"]]["spec"].get("clusterIP") == "None"
        if obj["kind"] == "NetworkPolicy":
            assert any(_matches(obj["spec"]["podSelector"], labels) for _, labels in pods), obj["metadata"]["name"]
            for rule in obj["spec"].get("ingress", []):
                for peer in rule.get("from", []):
                    assert any(_matches(peer["podSelector"], labels) for _, labels in pods), obj["metadata"]["name"]
    # Services are reached by the names the settings use.
    urls = " ".join(e.get("value", "") for _, c, _ in _corral_containers(objects) for e in c.get("env", []))
    urls += " ".join(v for cm in _by_kind(objects, "ConfigMap").values() for v in cm.get("data", {}).values())
    hosts = re.findall(r"([a-z][a-z-]+):(\d{4})", urls)
    assert {h for h, _ in hosts} == {"redis", "rabbitmq", "postgres", "image-service"}
    for host, port in hosts:
        assert host in services, f"{host} is used in a URL but is no Service"
        assert int(port) in {p["port"] for p in services[host]["spec"]["ports"]}, f"{host}:{port}"


# ---- what each service needs ------------------------------------------------------------------


def test_the_services_their_replicas_probes_and_resources(objects):
    workloads = {o["metadata"]["name"]: o for o in objects if o["kind"] in WORKLOADS}
    assert {n: workloads[n]["kind"] for n in ("api", "scheduler", "image-service")} == dict.fromkeys(
        ("api", "scheduler", "image-service"), "Deployment")
    assert workloads["api"]["spec"]["replicas"] >= 2 and workloads["scheduler"]["spec"]["replicas"] >= 2
    for store in ("redis", "rabbitmq", "postgres"):
        assert workloads[store]["kind"] == "StatefulSet" and workloads[store]["spec"]["volumeClaimTemplates"]
    redis = workloads["redis"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--appendonly" in redis and redis[redis.index("--appendonly") + 1] == "yes"
    assert redis[redis.index("--appendfsync") + 1] == "everysec"
    for obj in workloads.values():
        for container in _pod_containers(obj):
            where = f"{obj['metadata']['name']}/{container['name']}"
            assert {"requests", "limits"} <= set(container.get("resources", {})), f"{where}: no resources"
            assert "memory" in container["resources"]["limits"], where
            assert "readinessProbe" in container and "livenessProbe" in container, where
    for obj, container, service in _corral_containers(objects):
        assert re.search(r"(^|/)corral:", container["image"]), container["image"]
        for probe in ("readinessProbe", "livenessProbe"):
            assert container[probe]["httpGet"]["path"] == "/healthz", (service, probe)
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        host = {"api": "CORRAL_API_HOST", "scheduler": "CORRAL_SCHEDULER_HOST", "image-service": "CORRAL_IMAGE_HOST",
                "node-agent": "CORRAL_NODE_HOST", "memory-manager": "CORRAL_MEMORY_MANAGER_HOST"}[service]
        assert env[host] == "0.0.0.0", f"{service} must listen on the pod's address"  # noqa: S104
    dockerfile = (ROOT / "deploy/Dockerfile").read_text()
    assert all(package in dockerfile for package in PACKAGES)  # the image installs every service run here


def test_the_node_daemonset_has_the_privileges_the_node_agent_needs(objects):
    node = _by_kind(objects, "DaemonSet")["corral-node"]
    spec = node["spec"]["template"]["spec"]
    assert spec["hostPID"] is True
    containers = {c["name"]: c for c in spec["containers"]}
    assert set(containers) == {"node-agent", "memory-manager"}
    assert all(c["securityContext"]["privileged"] is True for c in containers.values())
    volumes = {v["name"]: v.get("hostPath", {}).get("path") for v in spec["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in containers["node-agent"]["volumeMounts"]}
    assert mounts["/var/lib/corral"] == "/var/lib/corral"
    assert mounts["/sys/fs/cgroup"] == "/sys/fs/cgroup"
    assert mounts["/run/corral"] == "/run/corral"
    env = {e["name"]: e for e in containers["node-agent"]["env"]}
    assert env["CORRAL_NODE_ADVERTISE_URL"]["value"] == "http://$(POD_IP):8100"
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    for container in containers.values():  # one node id for both, stable across restarts
        node_id = {e["name"]: e for e in container["env"]}["CORRAL_NODE_ID"]
        assert node_id["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"


def test_the_example_overlay_replaces_every_placeholder_secret():
    base = _by_kind(render(BASE), "Secret")["corral-secrets"]["stringData"]
    overlay = _by_kind(render(OVERLAY), "Secret")["corral-secrets"]["stringData"]
    assert set(overlay) == set(base)
    assert not [k for k, v in overlay.items() if "change-me" in v]
    assert all("change-me" in v for v in base.values())
