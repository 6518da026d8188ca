"""A worker's event line (``{"mapi_event": …}``, signed wire format) in
words, as ``mapi runs logs`` and the console print it."""

from __future__ import annotations

import json
from typing import Optional


def _clock(rfc3339: str) -> str:
    """``2026-12-02T04:00:30.28734Z`` as ``04:00:30.287``."""
    time = rfc3339.split("T", 1)[-1].rstrip("Z")
    if "." in time:
        hms, frac = time.split(".", 1)
        return f"{hms}.{frac[:3]:0<3}"
    return time


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    value, units = n / 1024, ["KiB", "MiB", "GiB", "TiB"]
    unit = 0
    while value >= 1024 and unit < len(units) - 1:
        value, unit = value / 1024, unit + 1
    return f"{value:.1f} {units[unit]}"


def event_in_words(text: str) -> Optional[str]:
    """The line in words; ``None`` when it is not an event line."""
    try:
        outer = json.loads(text.strip())
    except ValueError:
        return None
    e = outer.get("mapi_event") if isinstance(outer, dict) else None
    if not isinstance(e, dict) or "kind" not in e:
        return None
    at = f"{_clock(e['at'])} " if isinstance(e.get("at"), str) else ""
    kind = e["kind"]
    if kind == "progress":
        what = f"progress {e.get('fraction', 0) * 100:>3.0f}%  {e.get('message', '')}"
    elif kind == "metric":
        what = f"metric   {e.get('name', '?')} = {json.dumps(e.get('value'))}"
    elif kind == "checkpoint":
        what = f"checkpoint written (generation {e.get('generation')})"
    elif kind == "output":
        size = e.get("size")
        what = f"output   {e.get('name', '?')} ({_size(size) if isinstance(size, int) else '?'})"
    elif kind == "error":
        what = f"error    {e.get('message', '')}"
    else:
        what = str(kind)
    return f"{at}{what}".rstrip()
