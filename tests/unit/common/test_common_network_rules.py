"""The egress rule grammar and what no rule may open (corral_common.contracts.network)."""

import ipaddress

import pytest
from pydantic import ValidationError

from corral_common.contracts.network import (
    NetworkPolicy,
    RuleError,
    check_allowed,
    expand,
    is_forbidden,
    parse_rule,
    validate_policy,
)
from corral_common.contracts.sandboxes import SandboxSpec


@pytest.mark.parametrize("text,domain,net,ports", [
    ("pypi.example.org", "pypi.example.org", None, ()),
    ("PyPI.Example.org", "pypi.example.org", None, ()),
    ("*.example.org", "*.example.org", None, ()),
    ("mirror", "mirror", None, ()),
    ("git.example.org:22,443", "git.example.org", None, ((22, 22), (443, 443))),
    ("10.20.0.0/16", None, "10.20.0.0/16", ()),
    ("10.20.0.5", None, "10.20.0.5/32", ()),
    ("10.20.0.0/24:80,8000-8100", None, "10.20.0.0/24", ((80, 80), (8000, 8100))),
])
def test_rules_parse(text, domain, net, ports):
    rule = parse_rule(text)
    assert rule.domain == domain
    assert (str(rule.network) if rule.network else None) == net
    assert rule.ports == ports


@pytest.mark.parametrize("text", [
    "", "x..y", "-a.com", "a-.com", "*.", "*", "a.*.com", "exa mple.com", "a.com:0", "a.com:70000", "a.com:80-20",
    "a.com:", "a.com:x", "10.0.0.1/33", "10.0.0.1/24", "300.1.1.1", "::1", "[::1]:80", "2001:db8::/32",
    "localhost", "foo.localhost", "1.2.3", "a" * 64 + ".com", "a.com/x",
])
def test_malformed_rules_are_refused(text):
    with pytest.raises(RuleError):
        parse_rule(text)


def test_suffix_matches_below_only():
    rule = parse_rule("*.example.org")
    assert rule.matches_name("a.example.org") and rule.matches_name("a.b.example.org.")
    assert not rule.matches_name("example.org") and not rule.matches_name("badexample.org")
    exact = parse_rule("pypi.example.org:443")
    assert exact.matches_name("PYPI.example.org") and not exact.matches_name("x.pypi.example.org")
    assert exact.allows_port(443) and not exact.allows_port(80)


@pytest.mark.parametrize("cidr", ["127.0.0.1", "127.0.0.0/8", "169.254.169.254", "169.254.0.0/16", "0.0.0.0/0",
                                  "128.0.0.0/1", "224.0.0.1", "100.96.3.4", "10.9.9.9", "10.0.0.0/8"])
def test_forbidden_ranges_are_refused(cidr):
    forbidden = (ipaddress.ip_network("100.96.0.0/16"), ipaddress.ip_network("10.9.9.9/32"))
    with pytest.raises(RuleError):
        check_allowed(parse_rule(cidr), forbidden)


def test_allow_any_permits_wide_cidrs_but_never_inside_a_forbidden_range():
    forbidden = (ipaddress.ip_network("10.9.9.9/32"),)
    check_allowed(parse_rule("0.0.0.0/0"), forbidden, allow_any=True)
    check_allowed(parse_rule("10.0.0.0/8"), forbidden, allow_any=True)
    for inside in ("127.0.0.1", "169.254.169.254", "10.9.9.9"):
        with pytest.raises(RuleError):
            check_allowed(parse_rule(inside), forbidden, allow_any=True)
    check_allowed(parse_rule("10.8.0.0/16"), forbidden)


def test_platform_names_are_refused():
    with pytest.raises(RuleError):
        check_allowed(parse_rule("*.internal"), (), forbidden_names=["redis.internal"])
    check_allowed(parse_rule("pypi.internal"), (), forbidden_names=["redis.internal"])


def test_every_ipv6_address_is_forbidden_and_mapped_ipv4_is_judged_as_ipv4():
    assert is_forbidden(ipaddress.ip_address("2001:db8::1"), ())
    assert is_forbidden(ipaddress.ip_address("::ffff:127.0.0.1"), ())
    assert not is_forbidden(ipaddress.ip_address("198.18.0.1"), ())
    assert is_forbidden(ipaddress.ip_address("198.18.0.1"), (ipaddress.ip_network("198.18.0.0/15"),))


def test_validate_policy_names_every_problem_with_its_place():
    presets = {"pypi": ["pypi.mirror.test:8080"], "bad": ["127.0.0.1"]}
    policy = NetworkPolicy(allow=["ok.test", "169.254.169.254"], presets=["pypi", "nope", "bad"])
    problems = validate_policy(policy, presets, ())
    assert [loc for loc, _ in problems] == [["allow", 1], ["presets", 1], ["presets", 2]]
    assert "unknown preset 'nope'" in problems[1][1]
    rules = expand(NetworkPolicy(allow=["ok.test", "OK.test"], presets=["pypi"]), presets)
    assert [r.text for r in rules] == ["ok.test", "pypi.mirror.test:8080"]


def test_spec_network_default_none_and_errors_name_the_rule():
    assert SandboxSpec(environment="e").network == "none"
    spec = SandboxSpec(environment="e", network={"allow": ["a.test"], "presets": ["pypi"], "bandwidth_mbit": 10})
    assert isinstance(spec.network, NetworkPolicy) and spec.network.bandwidth_mbit == 10
    assert SandboxSpec.model_validate(spec.model_dump(mode="json")) == spec  # what the bus carries
    with pytest.raises(ValidationError) as exc:
        SandboxSpec(environment="e", network={"allow": ["ok.test", "x..y"]})
    assert exc.value.errors()[0]["loc"] == ("network", "allow", 1)
    for bad in ("all", 5, {"allow": [], "typo": 1}, {"bandwidth_mbit": 0}):
        with pytest.raises(ValidationError) as exc:
            SandboxSpec(environment="e", network=bad)
        assert exc.value.errors()[0]["loc"][0] == "network"
