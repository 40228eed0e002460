"""Port ingress (``/v1/sandboxes/{id}/ports/{port}/...``) with a hostile app in the sandbox.

The app is the attacker's code: it sees every byte of the requests sent to it and answers
whatever it likes. Ingress must hand it the request and nothing of Corral's (the caller's API
key, the internal token), reach only the sandbox's own loopback (never a service of the host),
and survive an answer that is not HTTP, without harm to the api, the node or a neighbour.
"""

import urllib.parse

import httpx

from tests.polling import until_sync
from tests.security.harness import HOME

REQUEST_LOG = f"{HOME}/request.txt"


def serve_once(attack, sandbox, port: int, answer: str) -> None:
    """A one-shot server on the sandbox's loopback: it writes the request it gets to
    REQUEST_LOG and sends ``answer`` (a printf format) back. Detached, so exec returns."""
    attack.sh(sandbox, f"(printf '{answer}' | nc -l -p {port} > {REQUEST_LOG}) > /dev/null 2>&1 < /dev/null &")


def ingress(lab, sandbox, port: int, path: str = "", **kwargs) -> httpx.Response | None:
    """One request through ingress; None while nothing listens yet (502 port_not_open)."""
    r = httpx.get(f"{lab.api}/v1/sandboxes/{sandbox.id}/ports/{port}/{path}", timeout=30, **kwargs)
    if r.status_code == 502 and "not open" in r.text:
        return None
    return r


def test_the_app_gets_no_credential_and_no_injected_header(attack, lab, platform):
    """Threat: the tenant's own trainer (or an E2B client) calls the sandbox's app with its API
    key; the app logs the request and keeps the key, then acts as the tenant (reads its other
    sandboxes, its rollouts, its images) or as the platform (the internal token). Also: a path
    that smuggles a CR LF into the request the node-agent sends, to add headers of its own."""
    app = attack.sandbox(probe=False)
    serve_once(attack, app, 8080, "HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\nConnection: close\\r\\n\\r\\nok")
    key = platform["api_key"]
    headers = {"Authorization": f"Bearer {key}", "X-API-Key": key, "Proxy-Authorization": f"Basic {key}",
               "X-Corral-Internal-Token": platform["internal_token"], "X-Ordinary": "kept"}
    # A CR LF in the path: the route takes no control characters (404), so nothing reaches the app.
    smuggled = urllib.parse.quote("page\r\nX-Injected: yes\r\n", safe="")
    refused = httpx.get(f"{lab.api}/v1/sandboxes/{app.id}/ports/8080/{smuggled}", headers=lab.headers, timeout=30)
    assert refused.status_code in (400, 404, 422) and refused.headers["content-type"].startswith("application/json")
    got = until_sync(lambda: ingress(lab, app, 8080, "page", headers=headers), timeout_s=30, what="the app to listen")
    assert (got.status_code, got.text) == (200, "ok"), got.text
    seen = until_sync(lambda: attack.sh(app, f"cat {REQUEST_LOG}").stdout or None, timeout_s=30,
                      what="the request the app logged")
    lines = [line.lower() for line in seen.split("\r\n")]
    assert lines[0].startswith("get /page") and "x-ordinary: kept" in lines, seen  # this request did arrive
    assert key not in seen and platform["internal_token"] not in seen, seen
    assert not any(line.startswith("x-injected") for line in lines), seen
    attack.contained()
    attack.end()


def test_ingress_reaches_the_sandbox_loopback_only(attack, lab, platform):
    """Threat: ask ingress for a port where a platform service listens on the host (the api, a
    node-agent, Redis, RabbitMQ): the node-agent connects from inside the sandbox's network
    namespace, so nothing answers there but the sandbox's own servers."""
    app = attack.sandbox(probe=False)
    ports = {urllib.parse.urlsplit(url).port for url in [*platform["urls"].values(), platform["redis_url"],
                                                         platform["amqp_url"]]}
    answered = []
    for port in sorted(p for p in ports if p):
        r = httpx.get(f"{lab.api}/v1/sandboxes/{app.id}/ports/{port}/healthz", headers=lab.headers, timeout=30)
        if not (r.status_code == 502 and r.json()["error"]["code"] == "port_not_open"):
            answered.append(f"port {port}: {r.status_code} {r.text[:120]!r}")
    assert not answered, "\n".join(answered)
    attack.contained()
    attack.end()


def test_an_answer_that_is_not_http_is_a_502_and_harms_nothing(attack, lab):
    """Threat: the app answers with an endless header (or garbage) to tie up or crash the
    node-agent's or the api's HTTP parser; the caller gets a JSON 502 and every other tenant,
    the node and the control plane go on."""
    app = attack.sandbox(probe=False)
    # An endless stream of header lines: the parser's header size limit ends it.
    attack.sh(app, "((printf 'HTTP/1.1 200 OK\\r\\n'; yes 'X-Flood: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa') "
                   "| nc -l -p 8081 > /dev/null) > /dev/null 2>&1 < /dev/null &")
    flood = until_sync(lambda: ingress(lab, app, 8081, headers=lab.headers), timeout_s=30, what="the app to listen")
    assert flood.status_code == 502 and flood.headers["content-type"].startswith("application/json"), flood.text
    serve_once(attack, app, 8082, "\\x00\\xff not http at all \\r\\n\\r\\n")
    garbage = until_sync(lambda: ingress(lab, app, 8082, headers=lab.headers), timeout_s=30, what="the app to listen")
    assert garbage.status_code == 502 and garbage.headers["content-type"].startswith("application/json"), garbage.text
    attack.contained()
    attack.end()
