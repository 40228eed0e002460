"""Formatting for people: ages, labels, sizes, capacity bars (pure functions, unit-tested)."""

import time
from datetime import datetime
from typing import Any

from rich.text import Text


def age(created: Any, now: float | None = None) -> str:
    """``"3s"``, ``"5m"``, ``"2h"``, ``"4d"`` since an ISO time or a UNIX time; ``-`` when unknown."""
    if created in (None, ""):
        return "-"
    try:
        stamp = float(created) if isinstance(created, (int, float)) else datetime.fromisoformat(str(created)).timestamp()
    except ValueError:
        return "-"
    seconds = max(0, int((time.time() if now is None else now) - stamp))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def labels_text(labels: Any) -> str:
    if not isinstance(labels, dict) or not labels:
        return "-"
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def size(n: int | float | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def bar(used: float, total: float | None, width: int = 20) -> Text:
    """``[#######-------------] 35%`` as rich Text, green/yellow/red by fill; ``n/a`` without a total."""
    if not total:
        return Text("n/a", style="dim")
    fraction = min(1.0, max(0.0, used / total))
    filled = round(fraction * width)
    style = "green" if fraction < 0.7 else "yellow" if fraction < 0.9 else "red"
    text = Text("[")
    text.append("#" * filled, style=style)
    text.append("-" * (width - filled), style="dim")
    text.append(f"] {fraction * 100:3.0f}%")
    return text


def counts_text(counts: dict[str, int]) -> str:
    return " ".join(f"{state}={n}" for state, n in sorted(counts.items())) or "-"
