"""``analyze()``: walks a net layer by layer through the shape rules and totals the numbers."""

from keras_caffe.errors import ArgumentError, GraphError, LayerError
from keras_caffe.importers.analyze import (  # noqa: F401  (importing registers the rules)
    shapes_data,
    shapes_elementwise,
    shapes_losses,
    shapes_structure,
    shapes_vision,
)
from keras_caffe.importers.analyze.communication import parse_bandwidth
from keras_caffe.importers.analyze.report import LayerStats, Report
from keras_caffe.importers.analyze.shapes import _RULES, _check_types, _count, _fmt
from keras_caffe.importers.analyze.units import DEFAULT_BANDWIDTH
from keras_caffe.importers.netfile import load_net, net_state


def analyze(net, batch=1, workers=1, bandwidth=DEFAULT_BANDWIDTH, phase="TEST", *,
            level=0, stages=(), input_shapes=None):
    """Sizes, FLOPs and data-parallel communication of a Caffe net.

    Args:
        net: a .prototxt path, its text, or a ``NetParameter`` (upgraded on load).
        batch: the batch size; replaces the first axis of every input
            (``None`` keeps the net's own).
        workers: data-parallel workers ``p`` (the batch is per step, all
            workers together, as in FireCaffe).
        bandwidth: per-link bandwidth ``beta`` in bytes/s, or a string with a
            unit (``"10Gbit/s"``; see ``parse_bandwidth``).
        phase, level, stages: which layers (Caffe's include/exclude rules).
        input_shapes: ``{top: shape without the batch}`` for data layers that
            do not state their shapes (Data, ImageData, ...); overrides an
            Input layer's shape too.
    Returns:
        a ``Report``.
    Raises:
        UnknownLayerTypeError: a layer type with no shape rule (names the
            layers and types); ``LayerError`` (names the layer) when a
            shape cannot be computed; ``GraphError`` for bad wiring;
            ``ArgumentError`` for bad arguments.
    """
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        raise ArgumentError("analyze", "batch",
                            f"must be a positive integer or None, got {batch!r}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ArgumentError("analyze", "workers", f"must be a positive integer, got {workers!r}")
    bandwidth = parse_bandwidth(bandwidth)
    param, source, _ = load_net(net, net_state(phase, level, stages),
                                known=lambda layer_type: layer_type in _RULES)
    _check_types(param, source)
    state = _State(batch, dict(input_shapes or {}), source)
    shapes, owners, rows = {}, {}, []
    for layer in param.layer:
        for bottom in layer.bottom:
            if bottom not in shapes:
                raise GraphError(f"{source}: layer {layer.name!r} ({layer.type}) takes bottom "
                                 f"{bottom!r}, which no earlier layer produces")
        bottoms = [shapes[b] for b in layer.bottom]
        rule = _RULES[layer.type]
        try:
            tops, weight_shapes, macs = rule(layer, bottoms, state)
        except LayerError:
            raise
        except (ValueError, ZeroDivisionError, IndexError) as err:
            given = ", ".join(_fmt(s) for s in bottoms) or "none"
            raise LayerError(layer.name, f"({layer.type}) cannot compute its output shape from "
                                         f"input shape(s) {given}: {err}") from None
        if len(tops) != len(layer.top):
            raise LayerError(layer.name, f"({layer.type}) produces {len(tops)} top(s) but names "
                                         f"{len(layer.top)}")
        for top, shape in zip(layer.top, tops):
            if any(d <= 0 for d in shape):
                given = ", ".join(_fmt(s) for s in bottoms) or "none"
                raise LayerError(layer.name, f"({layer.type}) top {top!r} would have shape "
                                             f"{_fmt(shape)} (input shape(s) {given})")
            shapes[top] = shape
        owned = []
        for i, blob in enumerate(weight_shapes):
            spec_name = layer.param[i].name if i < len(layer.param) else ""
            if spec_name:
                if spec_name in owners:
                    if _count(owners[spec_name][1]) != _count(blob):
                        raise LayerError(layer.name, f"shares parameter {spec_name!r} of shape "
                                                     f"{_fmt(owners[spec_name][1])} but needs "
                                                     f"{_fmt(blob)}")
                    continue
                owners[spec_name] = (layer.name, blob)
            owned.append(tuple(blob))
        forward = 2 * macs
        rows.append(LayerStats(
            name=layer.name, type=layer.type,
            tops=tuple((top, tuple(shape)) for top, shape in zip(layer.top, tops)),
            weight_shapes=tuple(owned), weights=sum(_count(s) for s in owned),
            activations=0 if layer.type == "Split" else sum(_count(s) for s in tops),
            forward_flops=forward, backward_flops=2 * forward,
            in_place=any(top in layer.bottom for top in layer.top),
        ))
    unused = sorted(set(state.input_shapes) - state.used_inputs)
    if unused:
        raise ArgumentError("analyze", "input_shapes",
                            f"names {', '.join(map(repr, unused))}, which no data or Input layer "
                            "of the net produces")
    return Report(name=param.name or "net", source=source,
                  phase=phase.upper() if isinstance(phase, str) else str(phase),
                  batch=batch if batch is not None else _net_batch(rows), workers=workers,
                  bandwidth=bandwidth, layers=tuple(rows))


def _net_batch(rows):
    for row in rows:
        for _, shape in row.tops:
            if shape:
                return shape[0]
    return 1


class _State:
    def __init__(self, batch, input_shapes, source):
        self.batch = batch
        self.input_shapes = input_shapes
        self.source = source
        self.used_inputs = set()

    def input_shape(self, layer, top, stated):
        """The shape of an input top: ``input_shapes``, else ``stated`` (batch first)."""
        if top in self.input_shapes:
            self.used_inputs.add(top)
            per_sample = tuple(int(d) for d in self.input_shapes[top])
            batch = self.batch if self.batch is not None else (stated[0] if stated else 1)
            return (batch, *per_sample)
        if stated is None:
            raise LayerError(layer.name, f"({layer.type}) reads its data from a database or "
                                         f"file, so the shape of top {top!r} is unknown; give it "
                                         f"with input_shapes={{{top!r}: (C, H, W)}} or analyze "
                                         "the deploy net")
        stated = tuple(int(d) for d in stated)
        if not stated:
            raise LayerError(layer.name, f"({layer.type}) top {top!r} has an empty shape")
        return stated if self.batch is None else (self.batch, *stated[1:])
