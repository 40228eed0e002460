"""schemathesis against the live api, image-service and node-agent (conftest.py): every
operation of each OpenAPI document, the examples, coverage and fuzzing phases (valid and
invalid data, boundary values, unexpected methods), a bounded number of examples each.

What must hold for every request: no 5xx, and every 4xx is the platform's JSON error body
(``{"error": {"code", "message", "details"}}``). Stateful sequences are left out: the
coverage phase already sends the links' methods, and a sequence costs one chain of requests
per example.
"""

import json
import re

import schemathesis
import schemathesis.engine
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import Status, events

from tests.integration.contract_fuzz.conftest import API_KEY, TOKEN

MAX_EXAMPLES = 12
# Layer uploads are raw bytes like any octet-stream.
schemathesis.serializer.alias("application/x-tar", "application/octet-stream")
# Data-path operations go to the running sandbox (their inputs reach the node-agent).
DATA_PATH = r"^/v1/sandboxes/\{sandbox_id\}/(exec|exec/stream|files|files/list|screen|input)$"


@schemathesis.check
def error_bodies_are_json(ctx, response, case) -> bool | None:
    """A 4xx/5xx is the JSON error shape, saying what went wrong and where."""
    if response.status_code < 400:
        return None
    content_type = response.headers.get("content-type", [""])
    content_type = content_type[0] if isinstance(content_type, list) else content_type
    assert content_type.startswith("application/json"), \
        f"{response.status_code} answered as {content_type!r}: {response.text[:300]}"
    if case.method.upper() == "HEAD":
        return True  # the headers of the error; HTTP gives a HEAD answer no body
    body = json.loads(response.content)
    error = body.get("error") if isinstance(body, dict) else None
    assert isinstance(error, dict) and isinstance(error.get("code"), str) and isinstance(error.get("message"), str) \
        and isinstance(error.get("details"), list), f"not the error shape: {response.text[:300]}"
    return True


def config(headers: dict[str, str], sandbox_id: str | None = None) -> SchemathesisConfig:
    header_lines = ", ".join(f'"{k}" = "{v}"' for k, v in headers.items())
    operations = f"""
[[operations]]
include-path-regex = '{DATA_PATH}'
parameters = {{ "path.sandbox_id" = "{sandbox_id}" }}
""" if sandbox_id else ""
    return SchemathesisConfig.from_str(f"""
headers = {{ {header_lines} }}
seed = 10
[generation]
max-examples = {MAX_EXAMPLES}
mode = "all"
deterministic = true
[phases.stateful]
enabled = false
[checks]
enabled = false
[checks.not_a_server_error]
enabled = true
[checks.error_bodies_are_json]
enabled = true
[checks.unsupported_method]
enabled = true
[checks.allow_header_conformance]
enabled = true
[phases.coverage]
unexpected-methods = ["patch", "trace", "options"]
{operations}
""")


def _data_path(ctx) -> bool:
    return re.search(DATA_PATH, ctx.operation.path) is not None


def fuzz(url: str, headers: dict[str, str], sandbox_id: str | None = None) -> dict[str, set[int]]:
    """Run schemathesis's engine (what ``schemathesis run`` does) over ``url``'s OpenAPI
    document; fail listing every check that failed, with the request that made it fail.
    Returns the statuses each operation answered.

    With ``sandbox_id``, the data-path operations run first, on their own: schemathesis reuses
    the ids that responses show in every other operation too, so a later DELETE or pause may
    end the sandbox, and in one run the order of operations decides whether exec ever met it
    running (a CI run's exec answered only 409)."""
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json", config=config(headers, sandbox_id))
    # (exclude with a function both times: an include filter is not honoured beside the
    # config's [[operations]] selector, in schemathesis 4.32.)
    passes = [schema.exclude(lambda ctx: not _data_path(ctx)), schema.exclude(_data_path)] if sandbox_id else [schema]
    failures, requests, statuses, elapsed, by_phase = [], 0, {}, {}, {}
    for event in (e for part in passes for e in schemathesis.engine.from_schema(part).execute()):
        if isinstance(event, events.NonFatalError | events.FatalError):
            failures.append(f"{getattr(event, 'label', '')}: schemathesis error: "
                            f"{getattr(event, 'value', None) or event.exception!r}")
        recorder = getattr(event, "recorder", None)
        if recorder is None or not isinstance(event, events.ScenarioFinished | events.FuzzScenarioFinished):
            continue
        requests += len(recorder.interactions)
        elapsed[recorder.label] = elapsed.get(recorder.label, 0.0) + getattr(event, "elapsed_time", 0.0)
        phase = str(getattr(event, "phase", "fuzz"))
        by_phase[phase] = by_phase.get(phase, 0) + len(recorder.interactions)
        answered = statuses.setdefault(recorder.label, set())
        answered.update(i.response.status_code for i in recorder.interactions.values() if i.response is not None)
        for case_id, checks in recorder.checks.items():
            for check in checks:
                if check.status == Status.FAILURE and check.failure_info is not None:
                    failures.append(f"{recorder.label}: {check.name}: {check.failure_info.failure.title}\n"
                                    f"{check.failure_info.code_sample}")
    slowest = ", ".join(f"{label} {s:.1f} s" for label, s in sorted(elapsed.items(), key=lambda kv: -kv[1])[:3])
    print(f"schemathesis: {requests} requests over {len(statuses)} operations of {url} (slowest: {slowest}; {by_phase})")
    assert not failures, f"{len(failures)} failed checks:\n" + "\n\n".join(dict.fromkeys(failures))
    return statuses


def test_api_answers_every_input_without_a_server_error(fuzz_platform):
    statuses = fuzz(fuzz_platform["api"], {"authorization": f"Bearer {API_KEY}"}, fuzz_platform["sandboxes"]["api"])
    assert len(statuses) >= 30  # every operation of the document was tried
    # The data path reached the node-agent's fake sandbox (not only the api's validation).
    assert 200 in statuses["POST /v1/sandboxes/{sandbox_id}/exec"], statuses
    assert 204 in statuses["PUT /v1/sandboxes/{sandbox_id}/files"], statuses
    assert 200 in statuses["POST /v1/fncall"], statuses  # through the broker to the stub worker


def test_image_service_answers_every_input_without_a_server_error(fuzz_platform):
    statuses = fuzz(fuzz_platform["image-service"], {"x-corral-internal-token": TOKEN})
    assert 200 in statuses["GET /v1/environments/{name}"] or 404 in statuses["GET /v1/environments/{name}"]


def test_node_agent_answers_every_input_without_a_server_error(fuzz_platform):
    statuses = fuzz(fuzz_platform["node-agent"], {"x-corral-internal-token": TOKEN},
                    fuzz_platform["sandboxes"]["node-agent"])
    assert 200 in statuses["POST /v1/sandboxes/{sandbox_id}/exec"], statuses
