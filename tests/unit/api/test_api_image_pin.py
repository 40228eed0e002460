"""A create resolves its environment once, in the api, into a pin (ResolvedImage) that its
record and its ``sandbox.requested`` carry; a request body cannot supply or alter the pin."""

import httpx
import pytest

from corral_api.sandboxes.schemas import SandboxCreate
from corral_api.sandboxes.service import EnvironmentCatalog, SandboxService
from corral_api.sandboxes.waiters import StateWaiters
from corral_common.contracts.events import SANDBOX_REQUESTED_KEY, SandboxRequested
from corral_common.contracts.images import EnvironmentLayer, ImageServiceClient, ResolvedImage
from corral_common.contracts.sandboxes import SandboxSpec, SandboxState
from corral_common.store.state_records import SandboxRecord

DIGEST = "sha256:" + "a" * 64
FORGED = "sha256:" + "f" * 64
ANSWER = {"name": "busybox", "owner": "", "config": {"env": {"PATH": "/bin"}, "cwd": "/srv"},
          "layers": [{"kind": "base", "name": "busybox", "version": "1", "digest": DIGEST, "size": 4096}]}
PIN = ResolvedImage(name="busybox", layers=(EnvironmentLayer(kind="base", name="busybox", version="1", digest=DIGEST,
                                                             size=4096),), config=ANSWER["config"])


class Records:
    """The store's create, as the service calls it (a test double for a unit test of logic)."""

    def __init__(self) -> None:
        self.created: list[SandboxRecord] = []

    async def create_sandbox(self, sandbox_id, tenant, spec, *, required_node=None, image=None) -> SandboxRecord:
        record = SandboxRecord(id=sandbox_id, tenant=tenant, state=SandboxState.pending, spec=spec, created_at=1.0,
                               updated_at=1.0, required_node=required_node, image=image)
        self.created.append(SandboxRecord.from_hash(record.to_hash()))  # as Redis would give it back
        return record


class Bus:
    def __init__(self) -> None:
        self.published: list[tuple[str, SandboxRequested]] = []

    async def publish(self, key, event) -> None:
        # Through the wire format, as the scheduler would read it.
        self.published.append((key, SandboxRequested.model_validate_json(event.model_dump_json())))


def _service(asked: list[str]) -> tuple[SandboxService, Records, Bus]:
    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(f"{request.url.path}?{request.url.query.decode()}")
        if request.url.path == "/v1/environments/busybox":
            return httpx.Response(200, json=ANSWER)
        return httpx.Response(404)

    catalog = EnvironmentCatalog(ImageServiceClient("http://images", transport=httpx.MockTransport(handler)))
    records, bus = Records(), Bus()
    return SandboxService(records, bus, history=None, waiters=StateWaiters(), environments=catalog,
                          max_wait_s=1), records, bus


async def test_a_create_resolves_once_and_its_record_and_request_carry_the_pin():
    asked: list[str] = []
    service, records, bus = _service(asked)
    record = await service.create("acme", SandboxCreate.model_validate({"environment": "busybox"}))
    assert asked == ["/v1/environments/busybox?owner=acme"]  # once, as the tenant sees it
    (stored,) = records.created
    assert record.image == stored.image == PIN
    ((key, event),) = bus.published
    assert key == SANDBOX_REQUESTED_KEY and event.image == PIN and event.sandbox_id == record.id
    # The image config is applied to the spec as before.
    assert stored.spec.env == {"PATH": "/bin"} and stored.spec.workdir == "/srv"


async def test_a_record_without_a_pin_reads_back_as_none():
    record = SandboxRecord(id="sb-1", tenant="t", state=SandboxState.pending, spec=SandboxSpec(environment="e"),
                           created_at=1.0, updated_at=1.0)
    assert "image" not in record.to_hash() and SandboxRecord.from_hash(record.to_hash()).image is None


@pytest.mark.parametrize("field", ["image", "pin", "resolved_image", "layers"])
async def test_a_body_carrying_a_pin_is_ignored(field):
    forged = {"name": "busybox", "owner": "other",
              "layers": [{"kind": "base", "name": "busybox", "version": "9", "digest": FORGED, "size": 1}]}
    forged_value = forged["layers"] if field == "layers" else forged
    body = SandboxCreate.model_validate({"environment": "busybox", field: forged_value})
    assert field not in SandboxCreate.model_fields and field not in SandboxSpec.model_fields
    assert field not in body.model_dump()  # nothing of it reaches the spec
    asked: list[str] = []
    service, records, bus = _service(asked)
    await service.create("acme", body)
    (stored,) = records.created
    ((_, event),) = bus.published
    assert stored.image == event.image == PIN  # image-service's answer, not the body's
    assert FORGED not in str(stored.to_hash()) and FORGED not in event.model_dump_json()


async def test_a_disk_image_alone_has_no_pin():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"name": "ubuntu", "version": "1", "digest": DIGEST, "format": "qcow2"})

    catalog = EnvironmentCatalog(ImageServiceClient("http://images", transport=httpx.MockTransport(handler)))
    spec, image = await catalog.require_spec(SandboxSpec(disk_image="ubuntu", backend="vm"), tenant="acme")
    assert image is None and spec.disk_image == "ubuntu"
