"""corral.integrations: image names to Corral environments."""

from corral.integrations import environment_for


def test_environment_for_maps_images(monkeypatch):
    monkeypatch.delenv("CORRAL_IMAGE_MAP", raising=False)
    monkeypatch.setenv("CORRAL_ENVIRONMENT", "busybox")
    assert environment_for(None) == "busybox"
    assert environment_for("docker.io/library/python:3.11-slim") == "python"
    assert environment_for("ghcr.io/org/repo/judge@sha256:abc") == "judge"
    monkeypatch.setenv("CORRAL_IMAGE_MAP", '{"python:3.11-slim": "judge", "ubuntu": "debian-python"}')
    assert environment_for("python:3.11-slim") == "judge"
    assert environment_for("ubuntu:22.04") == "debian-python"
