"""Per-tenant in-flight limit: the counter, and reading the tenant's key as the routes do."""

from starlette.datastructures import Headers

from corral_api.limits import TenantLimiter, api_key_of


def test_a_tenant_at_its_limit_is_refused_and_others_are_not():
    limiter = TenantLimiter(2)
    assert limiter.try_acquire("a") and limiter.try_acquire("a")
    assert not limiter.try_acquire("a")
    assert limiter.try_acquire("b")  # another tenant has slots of its own
    limiter.release("a")
    assert limiter.inflight("a") == 1 and limiter.try_acquire("a")
    for tenant in ("a", "a", "b"):
        limiter.release(tenant)
    assert (limiter.inflight("a"), limiter.inflight("b")) == (0, 0)


def test_the_key_comes_from_bearer_or_x_api_key():
    assert api_key_of(Headers({"authorization": "Bearer k1"})) == "k1"
    assert api_key_of(Headers({"authorization": "bearer k1"})) == "k1"
    assert api_key_of(Headers({"x-api-key": "k2"})) == "k2"
    assert api_key_of(Headers({"authorization": "Basic abc"})) is None
    assert api_key_of(Headers({})) is None
