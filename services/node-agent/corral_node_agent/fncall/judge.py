"""Output comparison: ``exact``, ``tokens`` or ``float:<eps>``."""

import math
import re

_FLOAT = re.compile(r"^float:([0-9.eE+-]+)$")


def parse_compare(mode: str) -> tuple[str, float]:
    if mode in ("exact", "tokens"):
        return mode, 0.0
    m = _FLOAT.match(mode)
    if m:
        try:
            eps = float(m.group(1))
        except ValueError:
            eps = -1.0
        if eps >= 0 and math.isfinite(eps):
            return "float", eps
    raise ValueError(f"compare must be exact, tokens or float:<eps> (e.g. float:1e-6), not {mode!r}")


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
