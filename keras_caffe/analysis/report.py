"""``LayerStats`` and ``Report``: what ``analyze`` found, rendered with rich or as a dict."""

import dataclasses

from keras_caffe.analysis.communication import (
    parameter_server_time,
    reduction_tree_time,
    ring_allreduce_time,
)
from keras_caffe.analysis.tables import Column, Grid, to_rich
from keras_caffe.analysis.units import BYTES_PER_VALUE, MB


@dataclasses.dataclass(frozen=True)
class LayerStats:
    """One layer's numbers. Shapes include the batch; counts are values, not bytes."""

    name: str
    type: str
    #: ``((top name, shape), ...)``
    tops: tuple
    #: the shapes of the parameter blobs the layer owns (shared ones excluded)
    weight_shapes: tuple
    #: number of weight values the layer owns (|W_L| / 4)
    weights: int
    #: number of output values for the batch (|D_L| / 4)
    activations: int
    forward_flops: int
    backward_flops: int
    #: a top is also a bottom (Caffe computes the layer in place)
    in_place: bool = False

    @property
    def weight_bytes(self):
        return self.weights * BYTES_PER_VALUE

    @property
    def activation_bytes(self):
        return self.activations * BYTES_PER_VALUE

    @property
    def flops(self):
        return self.forward_flops + self.backward_flops

    def to_dict(self):
        return {
            "name": self.name,
            "type": self.type,
            "tops": {name: list(shape) for name, shape in self.tops},
            "weight_shapes": [list(s) for s in self.weight_shapes],
            "weights": self.weights,
            "weight_bytes": self.weight_bytes,
            "activations": self.activations,
            "activation_bytes": self.activation_bytes,
            "forward_flops": self.forward_flops,
            "backward_flops": self.backward_flops,
            "in_place": self.in_place,
        }


@dataclasses.dataclass(frozen=True)
class Report:
    """What ``analyze`` found; ``table()``/``communication_table()`` render it
    with rich (``rich.print(report)`` prints both), ``to_dict()`` for JSON."""

    name: str
    source: str
    phase: str
    batch: int
    workers: int
    #: bytes per second
    bandwidth: float
    layers: tuple

    # -- totals ---------------------------------------------------------------------------

    @property
    def weights(self):
        """Number of weight values."""
        return sum(layer.weights for layer in self.layers)

    @property
    def weight_bytes(self):
        """FireCaffe's |W| in bytes."""
        return self.weights * BYTES_PER_VALUE

    @property
    def activations(self):
        return sum(layer.activations for layer in self.layers)

    @property
    def activation_bytes(self):
        """FireCaffe's |D| in bytes (the whole batch)."""
        return self.activations * BYTES_PER_VALUE

    @property
    def forward_flops(self):
        return sum(layer.forward_flops for layer in self.layers)

    @property
    def backward_flops(self):
        return sum(layer.backward_flops for layer in self.layers)

    @property
    def flops(self):
        """Forward + backward FLOPs of one step (one batch)."""
        return self.forward_flops + self.backward_flops

    @property
    def communication(self):
        """Seconds per step: ``{"parameter_server", "reduction_tree", "ring_allreduce"}``."""
        args = (self.weight_bytes, self.workers, self.bandwidth)
        return {
            "parameter_server": parameter_server_time(*args),
            "reduction_tree": reduction_tree_time(*args),
            "ring_allreduce": ring_allreduce_time(*args),
        }

    def layer(self, name):
        """The ``LayerStats`` of the Caffe layer ``name``."""
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise KeyError(name)

    # -- rendering --------------------------------------------------------------------------

    def to_dict(self):
        """Plain types only (``json.dumps`` takes it)."""
        return {
            "net": self.name,
            "source": self.source,
            "phase": self.phase,
            "batch": self.batch,
            "workers": self.workers,
            "bandwidth_bytes_per_s": self.bandwidth,
            "units": {
                "weight_bytes": "bytes, float32", "activation_bytes": "bytes, float32",
                "flops": "floating-point operations per batch (2 per multiply-add)",
                "communication_s": "seconds per step",
            },
            "layers": [layer.to_dict() for layer in self.layers],
            "total": {
                "weights": self.weights,
                "weight_bytes": self.weight_bytes,
                "activations": self.activations,
                "activation_bytes": self.activation_bytes,
                "forward_flops": self.forward_flops,
                "backward_flops": self.backward_flops,
                "flops": self.flops,
            },
            "communication_s": self.communication,
        }

    def grid(self):
        """The per-layer table's data (``keras_caffe.analysis.tables.Grid``): one
        row per layer and a total row, every number whole."""
        grid = Grid(f"{self.name}: batch {self.batch}, phase {self.phase}",
                    [Column("layer"), Column("type"), Column("output shape"),
                     Column("weights", True), Column("|W| (MB)", True), Column("|D| (MB)", True),
                     Column("fwd FLOPs", True), Column("bwd FLOPs", True)])
        for layer in self.layers:
            shapes = ", ".join("x".join(map(str, s)) or "scalar" for _, s in layer.tops)
            grid.add_row(layer.name, layer.type, shapes, f"{layer.weights:,}",
                         _mb(layer.weight_bytes), _mb(layer.activation_bytes),
                         _flops(layer.forward_flops), _flops(layer.backward_flops))
        grid.add_row("total", "", "", f"{self.weights:,}", _mb(self.weight_bytes),
                     _mb(self.activation_bytes), _flops(self.forward_flops),
                     _flops(self.backward_flops), rule=True, bold=True)
        return grid

    def communication_grid(self):
        """The three communication times' table data."""
        grid = Grid(f"data-parallel communication per step: {self.workers} worker(s), "
                    f"{self.bandwidth * 8 / 1e9:g} Gbit/s, |W| = {_mb(self.weight_bytes)} MB",
                    [Column("scheme"), Column("formula"), Column("seconds", True)])
        times = self.communication
        for key, label, formula in (
                ("parameter_server", "parameter server", "2|W|p/β"),
                ("reduction_tree", "reduction tree", "2|W|log2(p)/β"),
                ("ring_allreduce", "ring all-reduce", "2(p-1)/p·|W|/β")):
            grid.add_row(label, formula, f"{times[key]:.6g}")
        return grid

    def table(self):
        """A ``rich.table.Table``: one row per layer and a total row."""
        return to_rich(self.grid())

    def communication_table(self):
        """A ``rich.table.Table`` of the three communication times."""
        return to_rich(self.communication_grid())

    def __rich__(self):
        from rich.console import Group

        return Group(self.table(), self.communication_table())


def _mb(count):
    return f"{count / MB:,.2f}"


def _flops(count):
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if count >= scale:
            return f"{count / scale:.4g}{prefix}"
    return str(count)
