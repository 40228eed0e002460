"""One settings naming convention (corral_common.settings), and the old names kept working."""

import pytest

from corral_api.settings import ApiSettings
from corral_common.settings import CommonSettings
from corral_image_service.settings import ImageServiceSettings
from corral_memory_manager.settings import MemoryManagerSettings
from corral_node_agent.settings import NodeAgentSettings
from corral_scheduler.settings import SchedulerSettings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    import os

    for name in list(os.environ):
        if name.startswith("CORRAL_") or name.endswith(("_HOST", "_PORT")):
            monkeypatch.delenv(name)


# (model, field, canonical env name, old env names, value as set, value as read)
RENAMED_ENV = [
    (CommonSettings, "heartbeat_timeout_s", "CORRAL_HEARTBEAT_TIMEOUT_S", ["CORRAL_NODE_HEARTBEAT_TIMEOUT_S"], "4", 4.0),
    (CommonSettings, "heartbeat_interval_s", "CORRAL_HEARTBEAT_INTERVAL_S", ["CORRAL_NODE_HEARTBEAT_INTERVAL_S"],
     "0.5", 0.5),
    (SchedulerSettings, "heartbeat_timeout_s", "CORRAL_HEARTBEAT_TIMEOUT_S", ["CORRAL_NODE_HEARTBEAT_TIMEOUT_S"],
     "4", 4.0),
    (NodeAgentSettings, "heartbeat_interval_s", "CORRAL_HEARTBEAT_INTERVAL_S", ["CORRAL_NODE_HEARTBEAT_INTERVAL_S"],
     "0.5", 0.5),
    (ApiSettings, "rollout_idle_pause_s", "CORRAL_API_ROLLOUT_IDLE_PAUSE_S", ["CORRAL_ROLLOUT_IDLE_PAUSE_S"], "7", 7.0),
    (ApiSettings, "rollout_ttl_s", "CORRAL_API_ROLLOUT_TTL_S", ["CORRAL_ROLLOUT_TTL_S"], "7", 7.0),
    (ApiSettings, "rollout_sweep_interval_s", "CORRAL_API_ROLLOUT_SWEEP_INTERVAL_S",
     ["CORRAL_ROLLOUT_SWEEP_INTERVAL_S"], "7", 7.0),
    (ApiSettings, "rollout_step_lease_s", "CORRAL_API_ROLLOUT_STEP_LEASE_S", ["CORRAL_ROLLOUT_STEP_LEASE_S"], "3", 3.0),
    (SchedulerSettings, "placement_strategy", "CORRAL_SCHEDULER_PLACEMENT_STRATEGY", ["CORRAL_PLACEMENT_STRATEGY"],
     "pack", "pack"),
    (SchedulerSettings, "placement_retry_s", "CORRAL_SCHEDULER_PLACEMENT_RETRY_S", ["CORRAL_PLACEMENT_RETRY_S"],
     "0.01", 0.01),
    (SchedulerSettings, "placement_prefetch", "CORRAL_SCHEDULER_PLACEMENT_PREFETCH", ["CORRAL_PLACEMENT_PREFETCH"],
     "9", 9),
    (SchedulerSettings, "reaper_interval_s", "CORRAL_SCHEDULER_REAPER_INTERVAL_S", ["CORRAL_REAPER_INTERVAL_S"],
     "3", 3.0),
    (MemoryManagerSettings, "node_id", "CORRAL_NODE_ID", [], "node-7", "node-7"),
    (MemoryManagerSettings, "proc_root", "CORRAL_MEMORY_MANAGER_PROC_ROOT", ["CORRAL_PROC_ROOT"], "/h/p", "/h/p"),
    (MemoryManagerSettings, "sys_root", "CORRAL_MEMORY_MANAGER_SYS_ROOT", ["CORRAL_SYS_ROOT"], "/h/s", "/h/s"),
]


@pytest.mark.parametrize("model, field, canonical, old, raw, value", RENAMED_ENV,
                         ids=[f"{r[0].__name__}.{r[1]}" for r in RENAMED_ENV])
def test_renamed_env_vars_read_under_both_names_the_canonical_one_wins(monkeypatch, model, field, canonical, old,
                                                                     raw, value):
    default = model.model_fields[field].default
    for name in [canonical, *old]:
        monkeypatch.setenv(name, raw)
        assert getattr(model(), field) == value, name
        monkeypatch.delenv(name)
    assert getattr(model(), field) == default
    monkeypatch.setenv(canonical, raw)
    for name in old:
        monkeypatch.setenv(name, str(default))
    assert getattr(model(), field) == value


# (model, old keyword, field)
RENAMED_FIELDS = [
    (ApiSettings, "api_host", "host"), (ApiSettings, "api_port", "port"), (ApiSettings, "api_data_dir", "data_dir"),
    (ApiSettings, "api_database_url", "database_url"), (ApiSettings, "api_keys", "keys"),
    (ApiSettings, "api_max_upload_mb", "max_upload_mb"), (ApiSettings, "api_max_wait_s", "max_wait_s"),
    (SchedulerSettings, "scheduler_host", "host"), (SchedulerSettings, "scheduler_port", "port"),
    (MemoryManagerSettings, "memory_manager_host", "host"), (MemoryManagerSettings, "memory_manager_port", "port"),
    (SchedulerSettings, "node_heartbeat_timeout_s", "heartbeat_timeout_s"),
    (NodeAgentSettings, "node_heartbeat_interval_s", "heartbeat_interval_s"),
]


@pytest.mark.parametrize("model, old, field", RENAMED_FIELDS, ids=[f"{r[0].__name__}.{r[1]}" for r in RENAMED_FIELDS])
def test_old_keyword_names_still_construct(model, old, field):
    value = 9 if model.model_fields[field].annotation in (int, float) else "x"
    assert getattr(model(**{old: value}), field) == value
    assert getattr(model(**{field: value}), field) == value


def test_env_names_unchanged_by_the_field_renames(monkeypatch):
    """The api/scheduler/memory-manager fields lost their Python prefix, not their env names."""
    for name, raw in [("CORRAL_API_HOST", "0.0.0.0"), ("CORRAL_API_PORT", "9000"), ("CORRAL_API_KEYS", "t:k"),
                      ("CORRAL_API_DATABASE_URL", "sqlite:///x.db"), ("CORRAL_API_DATA_DIR", "/d"),
                      ("CORRAL_API_MAX_UPLOAD_MB", "1"), ("CORRAL_API_MAX_WAIT_S", "5"),
                      ("CORRAL_SCHEDULER_HOST", "0.0.0.0"), ("CORRAL_SCHEDULER_PORT", "9001"),
                      ("CORRAL_MEMORY_MANAGER_HOST", "0.0.0.0"), ("CORRAL_MEMORY_MANAGER_PORT", "9003")]:
        monkeypatch.setenv(name, raw)
    api, scheduler, memory = ApiSettings(), SchedulerSettings(), MemoryManagerSettings()
    assert (api.host, api.port, api.keys, api.effective_database_url, api.data_dir, api.max_upload_mb,
            api.max_wait_s) == ("0.0.0.0", 9000, "t:k", "sqlite:///x.db", "/d", 1, 5.0)
    assert (scheduler.host, scheduler.port, memory.host, memory.port) == ("0.0.0.0", 9001, "0.0.0.0", 9003)
    assert ApiSettings(data_dir="/d", database_url="").effective_database_url == "sqlite:////d/api.db"


@pytest.mark.parametrize("model", [ApiSettings, SchedulerSettings, ImageServiceSettings, NodeAgentSettings,
                                   MemoryManagerSettings])
def test_shared_fields_read_corral_names_and_a_per_service_override(monkeypatch, model):
    prefix = model.model_config["env_prefix"]
    monkeypatch.setenv("CORRAL_REDIS_URL", "redis://shared")
    monkeypatch.setenv("CORRAL_PORT", "1")  # not a shared field: another service's port must not leak in
    assert model().redis_url == "redis://shared"
    assert model().port == model.model_fields["port"].default
    monkeypatch.setenv(f"{prefix}REDIS_URL", "redis://own")
    assert model().redis_url == "redis://own"


def test_bare_field_names_are_not_env_names(monkeypatch):
    """Kubernetes sets API_PORT=tcp://... for a service named api: no alias may match it."""
    monkeypatch.setenv("API_PORT", "tcp://10.0.0.1:8000")
    monkeypatch.setenv("NODE_ID", "wrong")
    monkeypatch.setenv("PORT", "1")
    assert ApiSettings().port == 8000
    assert MemoryManagerSettings().node_id == "node-1" and MemoryManagerSettings().port == 8003
