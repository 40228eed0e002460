"""Quota arithmetic of the admin ledger (the Lua scripts run against a real Redis in
tests/integration/control_plane/test_control_admin.py)."""

import pytest

from corral_api.admin.schemas import KeyCreate, Quotas, TenantCreate, TenantUpdate
from corral_api.auth.service import Principal, hash_key, new_key, parse_bootstrap_keys
from corral_api.quotas.ledger import UNLIMITED, Demand, fncall_burst, limits_argv, quota_exceeded, reported


def test_limits_are_in_the_ledgers_units_and_absent_or_null_is_unlimited():
    assert limits_argv({}) == [UNLIMITED] * 4
    assert limits_argv({"max_sandboxes": 3, "max_cpu": 1.5, "max_memory_mb": 512, "max_disk_mb": None}) == [
        3, 1500, 512, UNLIMITED]
    assert limits_argv({"max_sandboxes": 0}) == [0, UNLIMITED, UNLIMITED, UNLIMITED]  # zero is a limit, not none


def test_a_job_asks_for_count_times_one_sandbox():
    assert Demand(1, 0.25, 64, 128).argv() == [1, 250, 64, 128]
    assert Demand(40, 2.0, 1024, 2048).argv() == [40, 2000, 1024, 2048]


def test_the_429_names_the_quota_its_limit_and_what_is_in_use():
    error = quota_exceeded("max_sandboxes", 3, 3, ["body"])
    body = error.to_body()["error"]
    assert error.status_code == 429 and body["code"] == "quota_exceeded"
    assert (body["quota"], body["limit"], body["used"], body["loc"]) == ("max_sandboxes", 3, 3, ["body"])
    assert body["details"] == [{"loc": ["body"], "msg": error.message}]
    assert reported("cpu_milli", 1500) == 1.5 and reported("memory_mb", 1500) == 1500


def test_the_fncall_burst_is_one_seconds_worth_and_at_least_one_call():
    assert fncall_burst(0.2) == 1.0 and fncall_burst(50) == 50


def test_quota_bodies_refuse_unknown_keys_and_negative_limits():
    with pytest.raises(ValueError, match="max_gpus"):
        Quotas.model_validate({"max_gpus": 1})
    with pytest.raises(ValueError, match="max_sandboxes"):
        Quotas.model_validate({"max_sandboxes": -1})
    with pytest.raises(ValueError):
        TenantCreate.model_validate({"name": "Not A Name"})
    with pytest.raises(ValueError):
        KeyCreate.model_validate({"tenant": "t", "role": "root"})
    update = TenantUpdate.model_validate({"quotas": {"max_cpu": None}})
    assert update.quotas.model_dump(exclude_unset=True) == {"max_cpu": None}  # null: back to unlimited


def test_keys_are_stored_as_hashes_and_bootstrap_specs_name_their_setting():
    key = new_key()
    assert key.startswith("ck_") and len(hash_key(key)) == 64 and key not in hash_key(key)
    assert parse_bootstrap_keys("ops:operator-key-1") == [("ops", "operator-key-1")]
    with pytest.raises(ValueError, match="CORRAL_API_OPERATOR_KEYS"):
        parse_bootstrap_keys("ops:short", "CORRAL_API_OPERATOR_KEYS")
    assert Principal("t", "operator", "key-1").is_operator and not Principal("t", "tenant", "key-2").is_operator
