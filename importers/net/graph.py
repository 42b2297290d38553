"""Building a Keras functional model from a (filtered, upgraded) Caffe net.

Blobs flow through the build as ``Blob``s: a Keras tensor plus its layout
relative to Caffe's blob:

- ``"caffe"``: the same axes and element order as Caffe's blob;
- ``"nhwc"``: a channels-last image tensor, Caffe's (N, C, H, W) as (N, H, W, C);
- ``"flat"``: (N, H*W*C) flattened from channels-last (``chw`` holds Caffe's
  (C, H, W)); an InnerProduct reading it permutes its weight rows at import.

Layout changes need no transposes for the common paths (conv, pooling,
InnerProduct); a layer type's unit that needs Caffe's order asks ``ctx.caffe_order``.
"""

import dataclasses

import keras
import numpy as np

from keras_caffe.errors import (
    CaffeImportError,
    GraphError,
    LayerError,
    UnknownLayerError,
)
from keras_caffe.importers.formats.net_proto import phase_value
from keras_caffe.importers.layer_types import base as layer_types, python_layer
from keras_caffe.importers.layer_types.base import ShapeState, fmt
from keras_caffe.importers.net.blobs import caffe_parts
from keras_caffe.importers.net.memory_budget import MemoryBudget
from keras_caffe.importers.net.registry import registered_types
from keras_caffe.importers.net.sharing import ParamSharing
from keras_caffe.layers import CaffeBlobs
from keras_caffe.layers.gradient import StopGradient, TopLoss

#: Largest number of values one layer's weights or one blob may have
#: (4 GiB of float32): larger requests are refused before allocating.
MAX_ELEMENTS = 2**30


@dataclasses.dataclass(frozen=True)
class Blob:
    tensor: object
    layout: str = "caffe"
    chw: tuple = None


class Context:
    """What the layer types' units use to build: the data format, layouts and naming."""

    def __init__(self, data_format, phase, source):
        self.data_format = data_format
        self.phase = phase
        self.source = source
        self._names = set()
        self.training = TrainingSpec()
        #: BatchNorm layer name -> the per-channel Scale fused into it.
        self.batchnorm_scale = {}
        #: {top: shape without the batch} overriding Input / data layer shapes.
        self.input_shapes = {}
        #: Owners and sharers of named parameters (``param { name }``).
        self.sharing = ParamSharing()
        #: The Caffe layer being built (a LayerParameter).
        self.layer = None
        #: Blobs a unit made beyond its tops (``add_blob``).
        self.extra_blobs = {}
        #: {layer name: [SkippedField]}: fields of Caffe forks the schema lacks.
        self.skipped_fields = {}
        #: The Caffe shapes (batch first) of the bottoms of the layer being
        #: built, and its unit's ``Shapes`` (None for a user's layer type
        #: without a shape rule).
        self.bottom_shapes = []
        self.shapes = None

    # -- naming --------------------------------------------------------------

    def keras_name(self, caffe_name, suffix=""):
        """A Keras layer name for a Caffe layer ('/' is not allowed in Keras)."""
        base = caffe_name.replace("/", "_") + suffix
        name, n = base, 1
        while name in self._names:  # a new, unique name on every call
            n += 1
            name = f"{base}_{n}"
        self._names.add(name)
        return name

    # -- shapes and axes -------------------------------------------------------

    def caffe_shape(self, blob):
        """The Caffe shape of a blob (batch as None)."""
        shape = tuple(blob.tensor.shape)
        if blob.layout == "nhwc":
            return (shape[0], shape[-1], *shape[1:-1])
        return shape

    def axis(self, blob, caffe_axis):
        """The tensor axis of Caffe's ``caffe_axis`` (negative allowed)."""
        rank = len(blob.tensor.shape)
        axis = caffe_axis + rank if caffe_axis < 0 else caffe_axis
        if not 0 <= axis < rank:
            raise ValueError(f"axis {caffe_axis} is out of range for a {rank}-D blob")
        if blob.layout == "nhwc":
            return 0 if axis == 0 else (rank - 1 if axis == 1 else axis - 1)
        if blob.layout == "flat" and axis != 0:
            raise ValueError("this blob was flattened from channels-last data; ask caffe_order()")
        return axis

    # -- layouts -------------------------------------------------------------

    def image_output(self, tensor):
        """A Blob for a unit's image output (rank >= 3)."""
        channels_last = self.data_format == "channels_last" and len(tensor.shape) >= 3
        return Blob(tensor, "nhwc" if channels_last else "caffe")

    def as_image(self, blob, layer):
        """The tensor in the model's image layout (for conv, pooling, ...).

        ``layer`` (a LayerParameter or a name) names the error and the layers
        added."""
        name = _name_of(layer)
        if len(blob.tensor.shape) < 3 or blob.layout == "flat":
            raise LayerError(name, f"needs an image blob (N, C, H, W), got shape "
                                   f"{self.caffe_shape(blob)}")
        if self.data_format == "channels_last" and blob.layout == "caffe":
            rank = len(blob.tensor.shape)
            perm = (*range(2, rank), 1)
            return keras.layers.Permute(perm, name=self.keras_name(name, "_to_nhwc"))(blob.tensor)
        return blob.tensor

    def caffe_order(self, blob, layer):
        """The blob with Caffe's axes and element order (a transpose if needed).

        ``layer`` (a LayerParameter or a name) names the layers added."""
        if blob.layout == "caffe":
            return blob
        name = _name_of(layer)
        if blob.layout == "nhwc":
            rank = len(blob.tensor.shape)
            perm = (rank - 1, *range(1, rank - 1))
            tensor = keras.layers.Permute(perm, name=self.keras_name(name, "_to_nchw"))(blob.tensor)
            return Blob(tensor)
        c, h, w = blob.chw
        image = keras.layers.Reshape((h, w, c), name=self.keras_name(name, "_unflatten"))(blob.tensor)
        image = keras.layers.Permute((3, 1, 2), name=self.keras_name(name, "_to_nchw"))(image)
        return Blob(keras.layers.Flatten(name=self.keras_name(name, "_flatten_chw"))(image))

    def apply(self, keras_layer, inputs):
        """``keras_layer(inputs)`` for the layer being built; where that
        Caffe layer shares its parameters with an earlier one (``param {
        name }``), the earlier one's Keras layer is applied instead, so the
        variables are one (see ``keras_caffe.importers.net.sharing``).
        Units apply every blob-holding layer through this."""
        if isinstance(keras_layer, CaffeBlobs) and self.layer is not None \
                and any(spec.name for spec in self.layer.param):
            keras_layer = self.sharing.layer_for(self.layer, keras_layer, inputs)
        return keras_layer(inputs)

    def fork_fields(self, layer):
        """``{field name: text}`` of the fields of ``layer`` that keras-caffe's
        schema lacks (a fork's ``*_param``), as written in the file: a user's
        build function for a fork's layer type parses them with the fork's own
        schema (``text_format.Parse(text, fork_pb2.LayerParameter())``)."""
        return {f.field: f.text for f in self.skipped_fields.get(layer.name, ())}

    def add_blob(self, name, blob):
        """Name a blob the unit makes beyond its tops (ContrastiveLoss's
        stacked features: its prediction, and so a model output)."""
        self.extra_blobs[name] = blob

    def elementwise(self, keras_layer, blob):
        """Apply a layer that keeps shape and element order."""
        return self.same_layout(self.apply(keras_layer, blob.tensor), blob)

    def same_layout(self, tensor, blob):
        """A Blob for an elementwise result of ``blob``."""
        return Blob(tensor, blob.layout, blob.chw)

    def check_size(self, layer, count, what="weights"):
        if count > MAX_ELEMENTS:
            raise LayerError(layer.name, f"{what} of {count:,} values exceed the limit of "
                                         f"{MAX_ELEMENTS:,}; refusing to allocate")


class NetOutput:
    """One Caffe net output a loss or Accuracy layer computes: its ``top``
    (the blob name Caffe prints), the ``prediction`` and ``label`` blobs it
    reads, the Keras loss or metric ``fn`` and the loss ``weight`` (0 for a
    metric)."""

    def __init__(self, top, prediction, label, fn, weight, is_loss):
        self.top, self.prediction, self.label = top, prediction, label
        self.fn, self.weight, self.is_loss = fn, weight, is_loss


class TrainingSpec:
    """Losses and metrics of a TRAIN-phase net, by prediction blob;
    ``outputs`` lists them as Caffe's net outputs, in layer order."""

    def __init__(self):
        self.losses, self.metrics, self.labels = {}, {}, {}
        self.outputs = []

    def _label(self, layer, prediction, label):
        known = self.labels.setdefault(prediction, label)
        if known != label:
            raise LayerError(layer.name, f"blob {prediction!r} is compared with labels "
                                         f"{known!r} and {label!r}; one label blob per prediction")

    def add_loss(self, layer, prediction, label, loss, weight):
        self._label(layer, prediction, label)
        if prediction in self.losses:
            raise LayerError(layer.name, f"blob {prediction!r} already feeds a loss")
        self.losses[prediction] = (loss, float(weight))
        self.outputs.append(NetOutput(_top(layer), prediction, label, loss, float(weight), True))

    def add_metric(self, layer, prediction, label, metric):
        self._label(layer, prediction, label)
        self.metrics.setdefault(prediction, []).append(metric)
        self.outputs.append(NetOutput(_top(layer), prediction, label, metric, 0.0, False))

    def __bool__(self):
        return bool(self.labels)


def _top(layer):
    return layer.top[0] if layer.top else layer.name


def build_model(net, *, source, data_format="channels_last", phase="TEST", outputs=None,
                name=None, input_shapes=None, fork_fields=None):
    """The Keras functional model for a filtered, upgraded NetParameter.

    Returns ``(model, blobs)``: ``blobs`` maps each Caffe blob name to its
    ``Blob``. Model outputs are Caffe's net outputs (blobs no later layer
    consumes) unless ``outputs`` names blobs: one output is a tensor, several
    are a dict keyed by blob name (like pycaffe's ``forward()``);
    ``model.caffe_outputs`` lists their blob names, ``model.caffe_layer_order``
    the net's layer names in prototxt order.
    """
    _check_types(net, source)
    ctx = Context(data_format, phase, source)
    ctx.memory = MemoryBudget()
    ctx.batchnorm_scale = _batchnorm_scale_pairs(net, outputs or ())
    ctx.input_shapes = {top: tuple(shape) for top, shape in (input_shapes or {}).items()}
    ctx.skipped_fields = dict(fork_fields or {})
    state = ShapeState(None, ctx.input_shapes, source)
    blobs, inputs, available, used, silenced, caffe_shapes = {}, {}, {}, set(), {}, {}
    for index, layer in enumerate(net.layer):
        for bottom in layer.bottom:
            if bottom not in blobs:
                raise _missing_bottom(net, index, bottom, source)
            if blobs[bottom].tensor is None:
                raise LayerError(layer.name, f"reads {bottom!r}, a loss or metric output; "
                                             "only the training loop reads those")
        unit = layer_types.unit(layer.type)
        label_bottoms = unit.label_bottoms
        bottoms = _propagate_down(layer, [blobs[b] for b in layer.bottom], ctx, label_bottoms)
        ctx.bottom_shapes = [caffe_shapes[b] for b in layer.bottom]
        tops = _convert(unit, layer, bottoms, ctx, state)
        _record_shapes(layer, tops, ctx, caffe_shapes)
        tops = _loss_weights(layer, tops, ctx)
        _check_loss_propagation(layer, ctx, label_bottoms)
        for extra, blob in ctx.extra_blobs.items():
            if extra in blobs:
                raise LayerError(layer.name, f"makes blob {extra!r}, which the net already has")
            blobs[extra] = blob
        ctx.extra_blobs.clear()
        used.update(b for i, b in enumerate(layer.bottom) if i not in label_bottoms)
        if unit.data_layer:
            inputs.update((top, t.tensor) for top, t in zip(layer.top, tops))
        for bottom in layer.bottom:
            if available.pop(bottom, None) and layer.type == "Silence":
                silenced[bottom] = True
        for top, blob in zip(layer.top, tops):
            blobs[top] = blob
            if blob.tensor is not None:
                available[top] = True
    # Blobs read only as labels are training targets, not model inputs.
    labels = [b for b in inputs if b not in used and b in ctx.training.labels.values()]
    input_tops = [b for b in inputs if b not in labels]
    inputs = [inputs[b] for b in input_tops]
    if not inputs:
        raise GraphError(f"{source}: the net has no Input layer (or input fields) to feed it")
    if outputs:
        wanted = list(outputs)
    else:
        wanted = list(ctx.training.labels) + [
            b for b in available if blobs[b].tensor not in inputs and b not in ctx.training.labels
            and b not in labels]
    if not wanted:
        # Caffe's Silence swallows blobs nothing else reads (colorization's
        # only result): those are what the net computes.
        wanted = [b for b in silenced if blobs[b].tensor is not None
                  and blobs[b].tensor not in inputs and b not in labels]
    if not wanted:
        raise GraphError(f"{source}: the net computes nothing (every blob is an input)")
    for blob in wanted:
        if blob not in blobs:
            raise GraphError(f"{source}: no blob named {blob!r} to output")
    tensors = {b: _output(blobs[b], b, ctx) for b in wanted}
    model_outputs = tensors[wanted[0]] if len(wanted) == 1 else tensors
    model_inputs = inputs[0] if len(inputs) == 1 else inputs
    model = keras.Model(model_inputs, model_outputs, name=(name or net.name or "caffe_net").replace("/", "_"))
    model.caffe_outputs = wanted
    #: The blob names of the model's inputs, in order (data tops, not labels).
    model.caffe_inputs = input_tops
    model.caffe_training = ctx.training
    #: The net's layer names in prototxt order: Caffe's order of learnable
    #: parameters (``Net::learnable_params``), which solverstates follow.
    model.caffe_layer_order = [layer.name for layer in net.layer]
    #: The filtered, upgraded net, its ``state.phase`` the import's: what
    #: Caffe's ``Net::ToProto`` writes into a .caffemodel (``net_proto``).
    model.caffe_net = _with_phase(net, phase)
    # Each layer's ``param { lr_mult decay_mult }`` on its Keras layer,
    # sharers' merged into their owner's as Caffe does.
    ctx.sharing.resolve_multipliers(net, caffe_parts(model))
    return model, blobs


def _with_phase(net, phase):
    copy = type(net)()
    copy.CopyFrom(net)
    copy.state.phase = phase_value(phase)
    return copy


def _batchnorm_scale_pairs(net, outputs):
    """``{BatchNorm name: Scale layer}`` for the BatchNorm -> per-channel Scale
    idiom, where nothing but the Scale reads the BatchNorm's output."""
    pairs = {}
    layers = list(net.layer)
    for i, bn in enumerate(layers):
        if bn.type != "BatchNorm" or len(bn.top) != 1 or bn.top[0] in outputs \
                or any(spec.name for spec in bn.param):
            continue
        blob, readers = bn.top[0], []
        for later in layers[i + 1:]:
            if blob in later.bottom:
                readers.append(later)
            if blob in later.top:
                break  # overwritten (e.g. the Scale in place): later readers see that
        if len(readers) != 1 or readers[0].type != "Scale":
            continue
        scale = readers[0]
        p = scale.scale_param
        if len(scale.bottom) == 1 and p.axis in (1, -3) and p.num_axes == 1 \
                and not any(spec.name for spec in scale.param):
            pairs[bn.name] = scale
    return pairs


def _check_types(net, source):
    types = {layer.type for layer in net.layer}
    # Python layers run code the model file names: refused, but for the few
    # keras-caffe recognises and computes itself (python_layer.PYTHON_LAYERS).
    unsafe = python_layer.unsafe_layers(net)
    known = registered_types()
    missing = types - set(known)
    if missing:  # one error for all: the unknown types, then the Python layers refused
        units = layer_types.units()
        notes = [f"{t} is sized by analyze but not built: {units[t].analyze_only}"
                 for t in sorted(missing) if t in units and units[t].analyze_only]
        notes += [python_layer.refusal_reason(unsafe)] if unsafe else []
        raise UnknownLayerError(source, missing, known, notes)
    if unsafe:
        raise python_layer.refusal(source, unsafe)


def _convert(unit, layer, bottoms, ctx, state):
    ctx.layer = layer
    ctx.shapes = None
    if unit.shapes is not None:
        ctx.shapes = layer_types.run_shapes(unit, layer, ctx.bottom_shapes, state)
        for i, blob in enumerate(ctx.shapes.weights):
            ctx.check_size(layer, layer_types.count(blob), what=f"weight blob {i}")
        ctx.memory.check(layer, ctx.bottom_shapes, ctx.shapes)
    try:
        tops = unit.build(layer, bottoms, ctx)
        ctx.sharing.check_applied(layer)
    except CaffeImportError:
        raise
    except (ValueError, TypeError, IndexError) as err:
        shapes = ", ".join(str(ctx.caffe_shape(b)) for b in bottoms)
        raise LayerError(layer.name, f"({layer.type}) cannot be built on input shape(s) "
                                     f"{shapes}: {err}") from None
    if len(tops) != len(layer.top):
        raise LayerError(layer.name, f"({layer.type}) produces {len(tops)} blob(s) but names "
                                     f"{len(layer.top)} top(s)")
    for blob, top in zip(tops, layer.top):
        if blob.tensor is None:
            continue  # a loss or metric: nothing in the graph
        dims = [d for d in blob.tensor.shape[1:] if d is not None]
        if any(d <= 0 for d in dims):
            raise LayerError(layer.name, f"({layer.type}) top {top!r} would have shape "
                                         f"{ctx.caffe_shape(blob)}")
        ctx.check_size(layer, int(np.prod(dims, dtype=np.int64)), what=f"top {top!r} per sample")
    return tops


def _record_shapes(layer, tops, ctx, caffe_shapes):
    """Each top's Caffe shape (batch first) for the shape rules of later
    layers: the unit's, checked against what the Keras layers built (they
    must agree on every axis Keras knows); a user's layer type's from Keras."""
    batch = ctx.bottom_shapes[0][0] if ctx.bottom_shapes and ctx.bottom_shapes[0] else 1
    for i, (top, blob) in enumerate(zip(layer.top, tops)):
        built = None if blob.tensor is None else ctx.caffe_shape(blob)
        if ctx.shapes is None:
            if built is not None:
                caffe_shapes[top] = (batch, *built[1:]) if built else ()
            continue
        rule = tuple(ctx.shapes.tops[i])
        if built is not None and (len(built) != len(rule) or any(
                k is not None and k != r for k, r in zip(built[1:], rule[1:]))):
            raise LayerError(layer.name, f"({layer.type}) the Keras layers give top {top!r} the "
                                         f"shape {fmt((None, *built[1:]))} but its shape rule "
                                         f"gives {fmt(rule)}: a keras-caffe bug, please report "
                                         "it with the prototxt")
        caffe_shapes[top] = rule


def _propagate_down(layer, bottoms, ctx, label_bottoms):
    """The bottoms as ``layer`` reads them: with their gradient stopped where
    its ``propagate_down`` is false (``Net::Init``: no diff for that bottom)."""
    flags = list(layer.propagate_down)
    if not flags:
        return bottoms
    if len(flags) != len(bottoms):
        raise LayerError(layer.name, f"propagate_down must be given 0 or {len(bottoms)} times "
                                     f"(once per bottom), got {len(flags)}")
    out = []
    for i, (blob, flag) in enumerate(zip(bottoms, flags)):
        if not flag and blob.tensor is not None and i not in label_bottoms:
            stop = StopGradient(name=ctx.keras_name(layer.name, f"_no_backward_{i}"))
            blob = ctx.same_layout(stop(blob.tensor), blob)
        out.append(blob)
    return out


def _check_loss_propagation(layer, ctx, label_bottoms):
    """A loss reads its prediction by blob name, so ``propagate_down: false``
    on it cannot stop its gradient: refused, not silently ignored."""
    flags = list(layer.propagate_down)
    stopped = [layer.bottom[i] for i, flag in enumerate(flags)
               if not flag and i not in label_bottoms]
    if stopped and any(o.is_loss and o.top == _top(layer) for o in ctx.training.outputs):
        raise LayerError(layer.name, f"propagate_down: false on the loss's prediction "
                                     f"{stopped[0]!r} (a loss that trains nothing) is not "
                                     "supported; loss_weight: 0 trains nothing either")


def _loss_weights(layer, tops, ctx):
    """Tops with a ``loss_weight`` that a loss layer does not take itself (a
    non-loss layer's): their weighted sum joins the objective (``TopLoss``)."""
    weights = list(layer.loss_weight)
    if not weights:
        return tops
    if len(weights) != len(layer.top):
        raise LayerError(layer.name, f"loss_weight must be given 0 or {len(layer.top)} times "
                                     f"(once per top), got {len(weights)}")
    out = []
    for i, (blob, weight) in enumerate(zip(tops, weights)):
        if weight != 0 and blob.tensor is not None:
            loss = TopLoss(weight, name=ctx.keras_name(layer.name, f"_loss_weight_{i}"))
            blob = ctx.same_layout(loss(blob.tensor), blob)
        out.append(blob)
    return out


def _output(blob, name, ctx):
    """Model outputs: rank >= 3 in the model's data format, 2-D in Caffe's order."""
    if blob.layout == "flat":
        return ctx.caffe_order(blob, name).tensor
    rank = len(blob.tensor.shape)
    if blob.layout == "caffe" and rank >= 3 and ctx.data_format == "channels_last":
        perm = (*range(2, rank), 1)
        return keras.layers.Permute(perm, name=ctx.keras_name(name, "_output_nhwc"))(blob.tensor)
    return blob.tensor


def _name_of(layer):
    return layer if isinstance(layer, str) else layer.name


def _missing_bottom(net, index, bottom, source):
    layer = net.layer[index]
    producers = [i for i, l in enumerate(net.layer) if bottom in l.top and i > index]
    if producers:
        cycle = _find_cycle(net)
        if cycle:
            return GraphError(f"{source}: the net has a cycle: {' -> '.join(cycle)}")
        later = net.layer[producers[0]].name
        return GraphError(
            f"{source}: layer {layer.name!r} takes bottom {bottom!r} before layer {later!r} "
            "produces it; Caffe needs each layer after the layers it reads"
        )
    return GraphError(
        f"{source}: layer {layer.name!r} ({layer.type}) takes bottom {bottom!r}, "
        "which no layer produces"
    )


def _find_cycle(net):
    """Layer names around a cycle of the blob graph, or None."""
    producers = {}
    for i, layer in enumerate(net.layer):
        for top in layer.top:
            if top not in layer.bottom:
                producers.setdefault(top, []).append(i)
    edges = {i: {p for b in l.bottom for p in producers.get(b, []) if p != i}
             for i, l in enumerate(net.layer)}
    state = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in edges[node]:
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt, path + [nxt])
                if found:
                    return found
        state[node] = "done"
        return None

    for start in edges:
        if start not in state:
            found = visit(start, [start])
            if found:
                return [net.layer[i].name for i in found]
    return None
