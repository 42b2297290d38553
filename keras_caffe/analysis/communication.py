"""Data-parallel communication time per step (FireCaffe section 4) and bandwidth parsing."""

import math
import re

from keras_caffe.errors import ArgumentError


def parameter_server_time(weight_bytes, workers, bandwidth):
    """FireCaffe's parameter server: ``2 |W| p / beta`` seconds."""
    return 2.0 * weight_bytes * workers / bandwidth


def reduction_tree_time(weight_bytes, workers, bandwidth):
    """FireCaffe's reduction tree: ``2 |W| log2(p) / beta`` seconds."""
    return 2.0 * weight_bytes * math.log2(workers) / bandwidth


def ring_allreduce_time(weight_bytes, workers, bandwidth):
    """Ring all-reduce: ``2 (p - 1) / p |W| / beta`` seconds."""
    return 2.0 * (workers - 1) / workers * weight_bytes / bandwidth


_BANDWIDTH = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z/]*)\s*$")
_PREFIX = {"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def parse_bandwidth(value):
    """Bytes per second from a number (bytes/s) or a string with a unit.

    Units: ``B/s`` (bytes) and ``bit/s``, ``b/s``, ``bps`` (bits), each with
    an optional prefix k, M, G, T (10**3...) or Ki, Mi, Gi, Ti (2**10...):
    ``"10Gbit/s"`` = ``"10 Gbps"`` = ``"1.25GB/s"`` = 1.25e9.
    """
    if isinstance(value, bool):
        raise ArgumentError("analyze", "bandwidth", f"must be a number or a string, got {value!r}")
    if isinstance(value, (int, float)):
        rate = float(value)
    elif isinstance(value, str):
        match = _BANDWIDTH.match(value)
        unit = match.group(2) if match else None
        factor = _bandwidth_unit(unit) if unit is not None else None
        if factor is None:
            raise ArgumentError("analyze", "bandwidth",
                                f"{value!r} is not a bandwidth: give bytes/s, or a number with a "
                                "unit such as '10Gbit/s', '56 Gbps' or '1.25 GB/s'")
        rate = float(match.group(1)) * factor
    else:
        raise ArgumentError("analyze", "bandwidth",
                            f"must be a number (bytes/s) or a string, got {type(value).__name__}")
    if not (rate > 0 and math.isfinite(rate)):
        raise ArgumentError("analyze", "bandwidth", f"must be positive and finite, got {value!r}")
    return rate


def _bandwidth_unit(unit):
    """Bytes/s per unit of ``unit``, or None."""
    if unit == "":
        return 1.0
    for suffix, per in (("B/s", 1.0), ("bit/s", 1 / 8), ("b/s", 1 / 8), ("bps", 1 / 8)):
        if unit.endswith(suffix) and unit[: -len(suffix)] in _PREFIX:
            return _PREFIX[unit[: -len(suffix)]] * per
    return None
