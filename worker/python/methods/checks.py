"""Checks of a method's parameters and dataset shared by the platform's Python methods: each returns
what it checked, or raises ValueError with a message that says what to fix. The standard library,
and numpy and pandas (which every base image holds) inside `table`."""

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


def table(ctx, p):
    """The dataset and what a method fits on it: (frame, y column, x columns, X as a float array), the
    x columns (every column but y when `x` is absent) checked present, distinct, numeric, complete and
    finite, and y complete."""
    import numpy as np
    import pandas as pd

    df = ctx.read_csv()
    ycol = p["y"]
    if ycol not in df.columns:
        raise ValueError(f"parameter y: column {ycol!r} is not in the dataset; its columns are {list(df.columns)}")
    xcols = p.get("x")
    if xcols is None or (isinstance(xcols, (list, tuple)) and len(xcols) == 0):
        xcols = [c for c in df.columns if c != ycol]
        if not xcols:
            raise ValueError(f"the dataset has no column besides y ({ycol!r}) to use as an input")
    else:
        if isinstance(xcols, str):
            xcols = [xcols]
        xcols = list(xcols)
        for c in xcols:
            if c not in df.columns:
                raise ValueError(f"parameter x: column {c!r} is not in the dataset; its columns are {list(df.columns)}")
        if ycol in xcols:
            raise ValueError(f"parameter x must not contain the target column {ycol!r} (y)")
        dup = sorted({c for c in xcols if xcols.count(c) > 1})
        if dup:
            raise ValueError(f"parameter x names column {dup[0]!r} more than once")
    for c in xcols:
        s = df[c]
        if not pd.api.types.is_numeric_dtype(s):  # (true/false columns count as 1/0)
            example = next((v for v in s if isinstance(v, str)), s.iloc[0] if len(s) else None)
            raise ValueError(
                f"input column {c!r} is not numeric (it holds values such as {example!r}): encode it as "
                f"numbers (e.g. one 0/1 column per category) or leave it out of x"
            )
        missing = int(s.isna().sum())
        if missing:
            raise ValueError(f"input column {c!r} has {missing} missing values: fill them or remove those rows")
        if not np.isfinite(s.to_numpy(dtype=float)).all():
            raise ValueError(f"input column {c!r} has infinite values: replace them or remove those rows")
    missing = int(df[ycol].isna().sum())
    if missing:
        raise ValueError(f"target column {ycol!r} (y) has {missing} missing values: remove those rows")
    if len(df) < 2:
        raise ValueError(f"the dataset has {len(df)} rows: at least 2 are needed")
    X = df[xcols].to_numpy(dtype=float)
    return df, ycol, xcols, X
