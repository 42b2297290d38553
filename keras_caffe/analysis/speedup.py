"""Predicted step time and speed-up of synchronous data-parallel SGD at several worker counts.

The model (strong scaling: the batch ``B`` of a step is fixed and split over
the ``p`` workers, as FireCaffe does, Iandola et al., CVPR 2016, section 4):

- compute: ``t_c(p) = F / B x ceil(B / p) / phi`` seconds, with ``F`` the
  forward + backward FLOPs of the whole batch (``Report.flops``: 2 FLOPs a
  multiply-add, backward = 2 x forward) and ``phi`` one worker's sustained
  FLOP/s, an assumption the caller states (``device_flops``). FLOPs are
  linear in the batch, so ``F / B`` is one sample's work; the slowest worker
  holds ``ceil(B / p)`` samples when ``p`` does not divide ``B``.
- communication: ``t_x(p)`` for the parameter server ``2|W|p/beta``, the
  reduction tree ``2|W|log2(p)/beta`` and the ring all-reduce
  ``2(p-1)/p |W|/beta`` (``communication.py``; latency ignored).
- step: ``t_c + t_x`` (communication starts when the backward pass ends; no
  overlap), or ``max(t_c, t_x)`` with ``overlap=True`` (perfect overlap of
  the gradient exchange with the backward pass, an upper bound on what
  overlapping can give).
- speed-up: ``t_c(1) / t(p)``: against one worker that computes the whole
  batch and communicates nothing (plain single-GPU training), the baseline
  FireCaffe's speed-ups are quoted against. The parameter server's ``p = 1``
  row is below 1: its single worker still ships ``2|W|`` to the server.
"""

import dataclasses
import math
import numbers
import re

from keras_caffe.errors import ArgumentError
from keras_caffe.analysis.communication import (
    parameter_server_time,
    parse_bandwidth,
    reduction_tree_time,
    ring_allreduce_time,
)
from keras_caffe.analysis.core import analyze
from keras_caffe.analysis.tables import Column, Grid, to_rich
from keras_caffe.analysis.units import MB

#: (key, label, function) of the communication schemes, in table order.
SCHEMES = (
    ("parameter_server", "parameter server", parameter_server_time),
    ("reduction_tree", "reduction tree", reduction_tree_time),
    ("ring_allreduce", "ring all-reduce", ring_allreduce_time),
)

#: FireCaffe's worker counts.
DEFAULT_WORKERS = (1, 2, 4, 8, 16, 32, 64, 128)

_FLOPS = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([kMGTP]?)\s*"
                    r"(FLOP/s|FLOPS|flop/s|FLOP/S|flops)?\s*$")
_SCALE = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}


def parse_flops(value):
    """FLOP/s from a number, or a string with a decimal prefix and an optional unit.

    ``"6.1T"`` = ``"6.1 TFLOP/s"`` = ``"6.1e12"`` = 6.1e12; prefixes k, M, G,
    T, P; units ``FLOP/s``, ``FLOPS``, ``flop/s``.
    """
    if isinstance(value, bool):
        raise ArgumentError("analyze", "device_flops",
                            f"must be a number or a string, got {value!r}")
    if isinstance(value, numbers.Real):
        rate = float(value)
    elif isinstance(value, str):
        match = _FLOPS.match(value)
        if match is None:
            raise ArgumentError("analyze", "device_flops",
                                f"{value!r} is not a FLOP rate: give FLOP/s, or a number with a "
                                "prefix such as '6.1T', '3.9 TFLOP/s' or '850 GFLOPS'")
        rate = float(match.group(1)) * _SCALE[match.group(2)]
    else:
        raise ArgumentError("analyze", "device_flops",
                            f"must be a number (FLOP/s) or a string, got {type(value).__name__}")
    if not (rate > 0 and math.isfinite(rate)):
        raise ArgumentError("analyze", "device_flops",
                            f"must be positive and finite, got {value!r}")
    return rate


def parse_workers(value):
    """A tuple of worker counts from an int, a sequence of ints, or ``"1,2,4"``.

    Each count is a positive integer; the counts must be distinct and are
    returned in increasing order.
    """
    if isinstance(value, str):
        parts = [part.strip() for part in value.split(",")]
        if not all(re.fullmatch(r"[0-9]+", part) for part in parts):
            raise ArgumentError("analyze", "workers",
                                f"{value!r} is not a worker count or a comma-separated list of "
                                "them (such as '8' or '1,2,4,8')")
        counts = [int(part) for part in parts]
    elif isinstance(value, numbers.Integral) and not isinstance(value, bool):
        counts = [int(value)]
    elif isinstance(value, (list, tuple, range)):
        counts = list(value)
        if not counts:
            raise ArgumentError("analyze", "workers", "is an empty list")
        for count in counts:
            if isinstance(count, bool) or not isinstance(count, numbers.Integral):
                raise ArgumentError("analyze", "workers",
                                    f"must hold integers, got {count!r} in {value!r}")
        counts = [int(c) for c in counts]
    else:
        raise ArgumentError("analyze", "workers",
                            f"must be a positive integer, a list of them or a string like "
                            f"'1,2,4', got {value!r}")
    bad = [c for c in counts if c < 1]
    if bad:
        raise ArgumentError("analyze", "workers",
                            f"must be positive, got {bad[0]} in {value!r}")
    if len(set(counts)) != len(counts):
        raise ArgumentError("analyze", "workers", f"lists a count twice: {value!r}")
    return tuple(sorted(counts))


@dataclasses.dataclass(frozen=True)
class ScalingRow:
    """The predicted step at ``workers`` workers; times in seconds."""

    workers: int
    #: samples of the busiest worker, ``ceil(batch / workers)``
    per_worker_batch: int
    compute_s: float
    #: ``{scheme: seconds}`` for the keys of ``SCHEMES``
    communication_s: dict
    step_s: dict
    speedup: dict

    def to_dict(self):
        return {"workers": self.workers, "per_worker_batch": self.per_worker_batch,
                "compute_s": self.compute_s, "communication_s": dict(self.communication_s),
                "step_s": dict(self.step_s), "speedup": dict(self.speedup)}


@dataclasses.dataclass(frozen=True)
class Scaling:
    """``scaling()``'s table: ``table()`` renders it with rich, ``to_dict()`` for JSON."""

    name: str
    batch: int
    #: bytes/s per link
    bandwidth: float
    #: one worker's sustained FLOP/s
    device_flops: float
    #: FireCaffe's |W|, bytes
    weight_bytes: int
    #: forward + backward FLOPs of one step (the whole batch)
    flops: int
    overlap: bool
    rows: tuple

    def row(self, workers):
        """The ``ScalingRow`` of ``workers`` workers."""
        for row in self.rows:
            if row.workers == workers:
                return row
        raise KeyError(workers)

    def to_dict(self):
        return {
            "net": self.name,
            "batch": self.batch,
            "bandwidth_bytes_per_s": self.bandwidth,
            "device_flops_per_s": self.device_flops,
            "weight_bytes": self.weight_bytes,
            "flops_per_step": self.flops,
            "overlap": self.overlap,
            "model": {
                "compute_s": "flops_per_step / batch * ceil(batch / p) / device_flops",
                "step_s": ("max(compute_s, communication_s)" if self.overlap
                           else "compute_s + communication_s"),
                "speedup": "compute_s at p=1 / step_s (one worker, no communication)",
            },
            "rows": [row.to_dict() for row in self.rows],
        }

    def grid(self):
        """The table's data (``keras_caffe.analysis.tables.Grid``): one row per worker count."""
        columns = [Column("p", True), Column("batch/worker", True), Column("compute (ms)", True)]
        for _, label, _ in SCHEMES:
            columns += [Column(f"{label}\ncomm (ms)", True), Column("step (ms)", True),
                        Column("speed-up", True)]
        grid = Grid(
            f"{self.name}: predicted step, batch {self.batch}, |W| = "
            f"{self.weight_bytes / MB:,.2f} MB, {_flops(self.flops)} FLOP a step, "
            f"{_flops(self.device_flops)} FLOP/s a worker, "
            f"{self.bandwidth * 8 / 1e9:g} Gbit/s, "
            f"{'overlapped' if self.overlap else 'no overlap'}", columns)
        for row in self.rows:
            cells = [str(row.workers), str(row.per_worker_batch), _ms(row.compute_s)]
            for key, _, _ in SCHEMES:
                cells += [_ms(row.communication_s[key]), _ms(row.step_s[key]),
                          f"{row.speedup[key]:.1f}x"]
            grid.add_row(*cells)
        return grid

    def table(self):
        """A ``rich.table.Table``: one row per worker count."""
        return to_rich(self.grid())

    def __rich__(self):
        return self.table()


def scaling(report, workers=DEFAULT_WORKERS, device_flops=None, *, bandwidth=None,
            overlap=False):
    """Predicted step time and speed-up at each worker count (see the module docstring).

    Args:
        report: an ``analyze`` ``Report`` (its batch is the batch of a step,
            all workers together; its |W|, FLOPs and bandwidth are used).
        workers: the worker counts ``p``: an int, a sequence, or ``"1,2,4"``.
        device_flops: one worker's sustained FLOP/s (a number, or ``"6.1T"``;
            see ``parse_flops``). Required: it is the model's main assumption.
        bandwidth: per-link bytes/s or a string with a unit; ``None`` keeps
            the report's.
        overlap: ``True`` for ``max(compute, communication)``, else their sum.
    Returns:
        a ``Scaling``.
    Raises:
        ArgumentError: bad ``workers`` (also: more workers than samples),
            ``device_flops``, ``bandwidth`` or ``overlap``.
    """
    counts = parse_workers(workers)
    if device_flops is None:
        raise ArgumentError("analyze", "device_flops",
                            "is needed for the predicted step time: give one worker's sustained "
                            "FLOP/s, such as '6.1T'")
    phi = parse_flops(device_flops)
    beta = report.bandwidth if bandwidth is None else parse_bandwidth(bandwidth)
    if not isinstance(overlap, bool):
        raise ArgumentError("analyze", "overlap", f"must be True or False, got {overlap!r}")
    batch = report.batch
    if counts[-1] > batch:
        raise ArgumentError("analyze", "workers",
                            f"{counts[-1]} workers exceed the batch of {batch}: a worker would "
                            "get no sample")
    flops, weight_bytes = report.flops, report.weight_bytes
    baseline = flops / phi
    rows = []
    for p in counts:
        share = -(-batch // p)
        compute = flops * share / batch / phi
        comm = {key: fn(weight_bytes, p, beta) for key, _, fn in SCHEMES}
        step = {key: (max(compute, t) if overlap else compute + t) for key, t in comm.items()}
        rows.append(ScalingRow(
            workers=p, per_worker_batch=share, compute_s=compute, communication_s=comm,
            step_s=step, speedup={key: baseline / t for key, t in step.items()}))
    return Scaling(name=report.name, batch=batch, bandwidth=beta, device_flops=phi,
                   weight_bytes=weight_bytes, flops=flops, overlap=overlap, rows=tuple(rows))


def analyze_scaling(net, workers=1, device_flops=None, *, batch=1, bandwidth="10Gbit/s",
                    phase="TEST", overlap=False, input_shapes=None):
    """``keras-caffe analyze``'s work: ``(report, scaling or None)``.

    ``workers`` is an int, a list or ``"1,2,4"``; the report's own
    communication table is for the largest count; ``input_shapes`` as
    ``analyze``'s. A scaling table is built
    when ``device_flops`` is given; a list of several counts needs it.
    """
    counts = parse_workers(workers)
    if device_flops is None and len(counts) > 1:
        raise ArgumentError("analyze", "device_flops",
                            "is needed for a list of worker counts: give one worker's sustained "
                            "FLOP/s, such as '6.1T'")
    report = analyze(net, batch=batch, workers=counts[-1], bandwidth=bandwidth, phase=phase,
                     input_shapes=input_shapes)
    if device_flops is None:
        return report, None
    return report, scaling(report, counts, device_flops, overlap=overlap)


def _flops(count):
    """``432``, ``6.761T``: 4 significant digits and a decimal prefix."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if count >= scale:
            return f"{count / scale:.4g}{prefix}"
    return f"{count:.4g}"


def _ms(seconds):
    return f"{seconds * 1e3:,.1f}"
