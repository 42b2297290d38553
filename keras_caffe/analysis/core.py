"""``analyze()``: walks a net layer by layer through the shape rules and totals the numbers."""

from keras_caffe.errors import ArgumentError, GraphError, LayerError, UnknownLayerError
from keras_caffe.analysis.communication import parse_bandwidth
from keras_caffe.analysis.report import LayerStats, Report
from keras_caffe.importers.layer_types import base, python_layer
from keras_caffe.importers.layer_types.base import ShapeState, count as _count, fmt as _fmt
from keras_caffe.analysis.units import DEFAULT_BANDWIDTH
from keras_caffe.importers.formats.netfile import load_net, net_state


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
                                known=python_layer.fields_known(_sized))
    _check_types(param, source)
    state = ShapeState(batch, dict(input_shapes or {}), source)
    shapes, owners, rows = {}, {}, []
    for layer in param.layer:
        for bottom in layer.bottom:
            if bottom not in shapes:
                raise GraphError(f"{source}: layer {layer.name!r} ({layer.type}) takes bottom "
                                 f"{bottom!r}, which no earlier layer produces")
        bottoms = [shapes[b] for b in layer.bottom]
        result = base.run_shapes(base.unit(layer.type), layer, bottoms, state)
        tops, weight_shapes, macs = result.tops, result.weights, result.macs
        for top, shape in zip(layer.top, tops):
            shapes[top] = tuple(shape)
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
            activations=(0 if base.unit(layer.type).aliases_bottom
                         else sum(_count(s) for s in tops)),
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


def _sized(layer_type):
    found = base.unit(layer_type)
    return found is not None and found.shapes is not None


class UnknownLayerTypeError(UnknownLayerError):
    """Layer types ``analyze`` has no shape rule for; names the layers."""

    def __init__(self, source, layers, known):
        self.layers = dict(layers)  # layer name -> type
        types = sorted(set(self.layers.values()))
        named = ", ".join(f"{name!r} ({kind})" for name, kind in self.layers.items())
        super().__init__(source, types, known)
        self.args = (f"{source}: cannot analyze layer(s) {named}: no shape rule for type(s) "
                     f"{', '.join(types)}; known types: {', '.join(self.known)}",)


def _check_types(net, source):
    # A Python layer keras-caffe does not recognise (python_layer.PYTHON_LAYERS)
    # has no shape rule: it would run code the model file names.
    unrecognised = set(python_layer.unsafe_layers(net))
    unknown = {layer.name: layer.type for layer in net.layer
               if not _sized(layer.type) or layer.name in unrecognised}
    if unknown:
        raise UnknownLayerTypeError(source, unknown,
                                    sorted(t for t in base.units() if _sized(t)))
