"""A tenant against the administration surface of the live platform: it can neither read nor
change another tenant's keys or quotas, nor make itself an operator key; its usage is its own."""

import uuid

import httpx
import pytest


@pytest.fixture
def admin(platform):
    with httpx.Client(base_url=platform["api"], timeout=30,
                      headers={"Authorization": f"Bearer {platform['operator_key']}"}) as http:
        yield http


@pytest.fixture
def victim(admin):
    """Another tenant with quotas and a key, made by the operator."""
    name = f"victim-{uuid.uuid4().hex[:8]}"
    assert admin.post("/v1/admin/tenants", json={"name": name, "quotas": {"max_sandboxes": 7}}).status_code == 201
    key = admin.post("/v1/admin/keys", json={"tenant": name, "name": "victim"}).json()
    return {"name": name, "key": key["key"], "key_id": key["id"]}


def test_a_tenant_cannot_read_or_change_another_tenants_keys_or_quotas(platform, admin, victim):
    name, key_id = victim["name"], victim["key_id"]
    attempts = [("GET", "/v1/admin/tenants", None), ("GET", f"/v1/admin/tenants/{name}", None),
                ("PATCH", f"/v1/admin/tenants/{name}", {"quotas": {"max_sandboxes": None}}),
                ("PATCH", f"/v1/admin/tenants/{name}", {"disabled": True}),
                ("GET", f"/v1/admin/keys?tenant={name}", None), ("GET", "/v1/admin/keys", None),
                ("POST", "/v1/admin/keys", {"tenant": name}),
                ("POST", "/v1/admin/keys", {"tenant": platform["tenant"], "role": "operator"}),
                ("POST", f"/v1/admin/keys/{key_id}/rotate", None), ("DELETE", f"/v1/admin/keys/{key_id}", None),
                ("POST", "/v1/admin/tenants", {"name": f"{name}-2"})]
    for header in ({"Authorization": f"Bearer {platform['api_key']}"}, {"X-API-Key": platform["api_key"]}):
        with httpx.Client(base_url=platform["api"], timeout=30, headers=header) as attacker:
            for method, path, body in attempts:
                r = attacker.request(method, path, json=body)
                assert r.status_code == 403 and r.json()["error"]["code"] == "operator_only", (method, path, r.text)
                assert name not in r.text and victim["key"] not in r.text
            # Its usage is its own: no parameter picks another tenant.
            usage = attacker.get("/v1/usage", params={"tenant": name})
            assert usage.status_code == 200 and usage.json()["tenant"] == platform["tenant"]
    # Nothing changed: the victim's quota, its one key (not revoked, still working), no new tenant.
    detail = admin.get(f"/v1/admin/tenants/{name}").json()
    assert detail["quotas"]["max_sandboxes"] == 7 and detail["disabled"] is False
    keys = admin.get("/v1/admin/keys", params={"tenant": name}).json()["keys"]
    assert [(k["id"], k["revoked_at"]) for k in keys] == [(key_id, None)]
    assert f"{name}-2" not in {t["name"] for t in admin.get("/v1/admin/tenants").json()["tenants"]}
    ops = admin.get("/v1/admin/keys", params={"tenant": platform["tenant"]}).json()["keys"]
    assert all(k["role"] == "tenant" for k in ops)
    with httpx.Client(base_url=platform["api"], timeout=30,
                      headers={"Authorization": f"Bearer {victim['key']}"}) as owner:
        assert owner.get("/v1/sandboxes").status_code == 200
