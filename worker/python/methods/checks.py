"""Checks of a method's parameters shared by the platform's Python methods (standard library only,
so every base image has what it needs): each returns the value, or raises ValueError with a message
that says what to fix."""

import math
import numbers


def integer(p, name, lo, hi):
    """`p[name]` as an int in [lo, hi] (a float with no fraction is taken as its int; a bool is not)."""
    v = p[name]
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        else:
            raise ValueError(f"parameter {name} must be an integer, not {v!r}")
    v = int(v)
    if not lo <= v <= hi:
        raise ValueError(f"parameter {name} must be between {lo} and {hi}, not {v}")
    return v


def number(p, name, lo, hi, lo_open=False):
    """`p[name]` as a finite float in [lo, hi] (or (lo, hi] with `lo_open`)."""
    v = p[name]
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(float(v)):
        raise ValueError(f"parameter {name} must be a finite number, not {v!r}")
    v = float(v)
    if (v <= lo if lo_open else v < lo) or v > hi:
        low = f"greater than {lo}" if lo_open else f"at least {lo}"
        raise ValueError(f"parameter {name} must be {low} and at most {hi}, not {v}")
    return v
