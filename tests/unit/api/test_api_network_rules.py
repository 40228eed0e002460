"""The api's egress check: unknown presets and platform targets are 422s naming the rule."""

import pytest

from corral_api.sandboxes.network import NetworkRules
from corral_common.contracts.network import NetworkPolicy
from corral_common.settings import CommonSettings
from corral_common.web.errors import Unprocessable


def _rules(**kw) -> NetworkRules:
    settings = CommonSettings(redis_url="redis://10.1.0.7:6379/0", amqp_url="amqp://u:p@10.1.0.8:5672/",
                              image_service_url="http://images.corral.test:8002",
                              network_presets={"pypi": ["pypi.mirror.test:8080"]}, **kw)
    return NetworkRules(settings, store=None, api_host="10.1.0.9")


@pytest.mark.parametrize("rule,index", [("10.1.0.7", 0), ("10.1.0.0/24", 0), ("100.96.0.0/24", 0),
                                        ("images.corral.test", 0), ("*.corral.test", 0), ("10.1.0.9:8000", 0)])
async def test_platform_services_cannot_be_allowed(rule, index):
    with pytest.raises(Unprocessable) as exc:
        await _rules().require(NetworkPolicy(allow=[rule]))
    assert exc.value.status_code == 422 and exc.value.code == "forbidden_network_rule"
    assert exc.value.loc == ["body", "network", "allow", index]


async def test_unknown_preset_is_422_and_known_ones_pass():
    rules = _rules()
    await rules.require(NetworkPolicy(presets=["pypi"], allow=["10.2.0.0/16:443"]))
    await rules.require("none")
    with pytest.raises(Unprocessable) as exc:
        await rules.require(NetworkPolicy(presets=["pypi", "npm"]))
    assert exc.value.code == "unknown_preset" and exc.value.loc == ["body", "network", "presets", 1]


async def test_deny_cidrs_and_allow_any():
    with pytest.raises(Unprocessable):
        await _rules(network_deny_cidrs=["10.50.0.0/16"]).require(NetworkPolicy(allow=["10.50.1.1"]))
    with pytest.raises(Unprocessable):
        await _rules().require(NetworkPolicy(allow=["0.0.0.0/0"]))
    await _rules(network_allow_any=True).require(NetworkPolicy(allow=["0.0.0.0/0"]))


async def test_vms_take_allowlists_unless_their_guest_is_not_corrals():
    await _rules().require(NetworkPolicy(presets=["pypi"]), backend="microvm")
    with pytest.raises(Unprocessable) as exc:
        await _rules().require(NetworkPolicy(presets=["pypi"]), backend="vm", guest_kit=False)
    assert exc.value.code == "unsupported_network" and exc.value.loc == ["body", "network"]
    await _rules().require("none", backend="vm", guest_kit=False)
