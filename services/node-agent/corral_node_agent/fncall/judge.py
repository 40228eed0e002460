"""Output comparison: ``exact``, ``tokens`` or ``float:<eps>`` (parsed by the fncall contract's
``parse_compare``, which the api validates requests with)."""

import math

from corral_common.contracts.fncall import parse_compare


def _float_equal(got: str, want: str, eps: float) -> bool:
    if got == want:
        return True
    try:
        a, b = float(got), float(want)
    except ValueError:
        return False
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    # absolute or relative error within eps (the usual judge rule)
    return abs(a - b) <= eps or abs(a - b) <= eps * abs(b)


def outputs_match(got: str, want: str, mode: str) -> bool:
    kind, eps = parse_compare(mode)
    if kind == "exact":
        return got == want
    got_tokens, want_tokens = got.split(), want.split()
    if len(got_tokens) != len(want_tokens):
        return False
    if kind == "tokens":
        return got_tokens == want_tokens
    return all(_float_equal(g, w, eps) for g, w in zip(got_tokens, want_tokens))
