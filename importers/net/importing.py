"""``import_model``: a Caffe net (and weights) -> a Keras model."""

import math
import numbers
import warnings

from keras_caffe.errors import ArgumentError, CaffeImportError, WeightsError
from keras_caffe.importers.formats.netfile import load_net, net_state
from keras_caffe.importers.layer_types.python_layer import fields_known
from keras_caffe.importers.net import lms_hook
from keras_caffe.importers.net.blobs import caffe_parts, caffe_sharers
from keras_caffe.importers.net.fold import fold_batchnorm as fold
from keras_caffe.importers.net.graph import MAX_ELEMENTS, build_model
from keras_caffe.importers.net.registry import is_builtin
from keras_caffe.importers.net.weights import load_weights


def import_model(net, weights=None, *, phase="TEST", data_format="channels_last", outputs=None,
                 level=0, stages=(), name=None, fold_batchnorm=False, input_shapes=None,
                 lms=None):
    """Build a Keras model from a Caffe net definition, with Caffe's numbers.

    Args:
        net: path to a .prototxt (deploy or train_val), its text, or a
            ``NetParameter``. V1 (``layers { type: CONVOLUTION }``) files and
            the deprecated ``input`` fields are upgraded on load.
        weights: optional ``.caffemodel`` (binary) or ``.caffemodel.h5``.
        phase: ``"TEST"`` or ``"TRAIN"``; with ``level`` and ``stages`` it
            picks layers by their ``include`` / ``exclude`` rules.
        data_format: ``"channels_last"`` (the fast layout; image inputs and
            outputs are (N, H, W, C), weights are converted at import) or
            ``"channels_first"`` (Caffe's layout).
        outputs: blob names to output; default: Caffe's net outputs (blobs no
            layer consumes).
        fold_batchnorm: fold each BatchNorm (and the Scale after it) into the
            Convolution before it, for inference (TEST phase, needs weights).
            By default they stay separate and trainable, as in Caffe.
        input_shapes: ``{top: shape without the batch}`` for Input or data
            layers (Data, ImageData, HDF5Data, DummyData, MemoryData), whose
            shapes are otherwise read from their parameters or sources.
            Always in Caffe's order, as an ``input_param { shape }`` states
            it: ``(C, H, W)`` for an image (``{"data": (3, 32, 32)}``),
            whatever ``data_format`` the model gets; ``()`` for a scalar label.
            An import that fails with a shape that looks like (H, W, C)
            says so. The command line's ``--input-shape data=3,32,32``.
        lms: a ``keras_caffe.LMS`` (Large Model Support: rematerialize or
            stage activations over its threshold while training); default:
            the one of an enclosing ``with keras_caffe.LMS(...)`` block, if any.
            Its prediction of the activation memory is ``keras-caffe
            analyze``'s |D| of this net.
    Returns:
        a ``keras.Model``; its layers are named after Caffe's ('/' becomes
        '_'; ``layer.caffe_name`` keeps the original on layers with blobs).
    """
    if lms is not None and not lms_hook.is_lms(lms):
        raise ArgumentError("import_model", "lms",
                            f"must be a keras_caffe.LMS or None, got {lms!r}")
    imported = import_net(net, weights, phase=phase, data_format=data_format, outputs=outputs,
                          level=level, stages=stages, name=name, fold_batchnorm=fold_batchnorm,
                          input_shapes=input_shapes)
    lms = lms if lms is not None else lms_hook.current()
    if lms is not None:
        lms.attach_to(imported, phase=phase, level=level, stages=stages, data_format=data_format)
    return imported.model


class ImportedNet:
    """What an import produced: ``model``, the filtered ``net`` and its ``blobs``."""

    def __init__(self, model, net, blobs, source):
        self.model, self.net, self.blobs, self.source = model, net, blobs, source


def import_net(net, weights=None, *, phase="TEST", data_format="channels_last", outputs=None,
               level=0, stages=(), name=None, fold_batchnorm=False, input_shapes=None):
    """``import_model`` that also returns the filtered net and blob map."""
    if data_format not in ("channels_last", "channels_first"):
        raise CaffeImportError(
            f"data_format must be 'channels_last' or 'channels_first', got {data_format!r}"
        )
    input_shapes = _checked_input_shapes(input_shapes)
    param, source, fork_fields = load_net(net, net_state(phase, level, stages),
                                          known=fields_known(is_builtin))
    blobs_in = load_weights(weights) if weights is not None else None
    if fold_batchnorm:
        if str(phase).upper() != "TEST":
            raise CaffeImportError(f"{source}: fold_batchnorm is for inference (phase TEST)")
        param, blobs_in = fold(param, blobs_in, source)
    try:
        model, blobs = build_model(param, source=source, data_format=data_format,
                                   phase=phase.upper() if isinstance(phase, str) else phase,
                                   outputs=outputs, name=name, input_shapes=input_shapes,
                                   fork_fields=fork_fields)
    except CaffeImportError as err:
        _blame_layout(input_shapes, err)
        raise
    if blobs_in is not None:
        load_into(model, blobs_in, source=str(weights))
    return ImportedNet(model, param, blobs, source)


def _checked_input_shapes(input_shapes):
    """``input_shapes`` as ``{str: tuple of positive ints}``, each at most
    ``graph.MAX_ELEMENTS`` values per sample (the most one blob may have);
    an ``ArgumentError`` naming the entry otherwise, before anything is built."""
    if input_shapes is None:
        return None
    if not isinstance(input_shapes, dict):
        raise ArgumentError("import_model", "input_shapes",
                            f"must be a dict {{top: (C, H, W)}}, got {input_shapes!r}")
    checked = {}
    for top, shape in input_shapes.items():
        try:
            dims = None if isinstance(shape, (str, bytes)) else tuple(shape)
        except TypeError:
            dims = None
        if not isinstance(top, str) or dims is None or any(
                isinstance(d, bool) or not isinstance(d, numbers.Integral) or d < 1
                for d in dims):
            raise ArgumentError("import_model", "input_shapes",
                                f"entry {top!r}: {shape!r} is not a shape: give the top's "
                                "per-sample shape in Caffe's order, positive integers, such "
                                "as (3, 32, 32)")
        checked[top] = tuple(int(d) for d in dims)
        values = math.prod(checked[top])
        if values > MAX_ELEMENTS:
            raise ArgumentError("import_model", "input_shapes",
                                f"entry {top!r}: {checked[top]} is {values:,} values per sample, "
                                f"more than the {MAX_ELEMENTS:,} one blob may have; refusing "
                                "to allocate")
    return checked


def _blame_layout(input_shapes, err):
    """Raise an ``ArgumentError`` saying that ``input_shapes`` is in Caffe's
    order when the import failed and an entry looks like (H, W, C): last
    dimension 1 or 3, first not."""
    for top, dims in (input_shapes or {}).items():
        if len(dims) == 3 and dims[-1] in (1, 3) and dims[0] not in (1, 3):
            caffe = (dims[2], dims[0], dims[1])
            raise ArgumentError(
                "import_model", "input_shapes",
                f"{top!r}: {dims} looks like (H, W, C); input_shapes takes Caffe's order "
                f"(C, H, W) whatever the data_format, here {caffe}. The import failed "
                f"with: {str(err).splitlines()[0]}") from err


class CopyReport:
    """What ``copy_layers`` did: ``copied`` (Caffe layers of the net given
    their blobs), ``ignored`` (layers of the weights the net lacks, which
    Caffe logs as "Ignoring source layer") and ``kept`` (layers of the net
    with blobs the weights lack: they keep their fillers' values, as a
    renamed layer does when fine-tuning)."""

    def __init__(self, copied, ignored, kept):
        self.copied, self.ignored, self.kept = list(copied), list(ignored), list(kept)

    def __repr__(self):
        return (f"CopyReport(copied={self.copied}, ignored={self.ignored}, "
                f"kept={self.kept})")


def copy_layers(model, weights, source="<weights>"):
    """Caffe's ``Net::CopyTrainedLayersFrom``: load ``{Caffe layer name:
    [blobs]}`` into the model's layers of the same names; returns a
    ``CopyReport``.

    A blob of another shape is refused as Caffe refuses it (rename the layer
    to learn it from scratch). A layer sharing another's parameters (``param
    { name }``) loads into the shared blobs, the later of the two in the
    file winning, as in Caffe; an owner's blobs alone suffice (Caffe's HDF5
    files hold no others).
    """
    parts = {name: part for name, part in caffe_parts(model).items() if part[2]}
    sharers = {s: o for s, o in caffe_sharers(model).items() if o in parts}
    by_layer, copied, ignored = {}, [], []
    for caffe_name, blobs in weights.items():
        if caffe_name not in parts and caffe_name not in sharers:
            ignored.append(caffe_name)
            continue
        copied.append(caffe_name)
        layer, start, count, _ = parts[sharers.get(caffe_name, caffe_name)]
        by_layer.setdefault(id(layer), (layer, {}))[1][start] = (caffe_name, count, blobs)
    hint = ("To learn this layer's parameters from scratch rather than copying from a saved "
            "net, rename the layer.")
    for layer, given in by_layer.values():
        expected = layer.caffe_blob_shapes()
        current = layer.caffe_blobs() if len(given) < len(layer.caffe_parts) else [None] * len(expected)
        for start, (caffe_name, count, blobs) in given.items():
            if len(blobs) != count:
                raise WeightsError(f"{source}: layer {caffe_name!r}: {len(blobs)} blobs in the "
                                   f"weights, the net needs {count} "
                                   f"{expected[start:start + count]}. {hint}")
            current[start:start + count] = blobs
        try:
            layer.set_caffe_blobs(current)
        except WeightsError as err:
            raise WeightsError(f"{source}: {err} {hint}") from None
    given = set(weights) | {owner for sharer, owner in sharers.items() if sharer in weights}
    kept = [name for name in parts if name not in given]
    return CopyReport(copied, ignored, kept)


def load_into(model, weights, source="<weights>"):
    """Load ``{Caffe layer name: [blobs]}`` into the model's layers
    (``copy_layers``), warning about layers the weights lack: they keep
    their initial values. Layers in the weights that the net lacks are
    ignored, as Caffe ignores them."""
    report = copy_layers(model, weights, source)
    if report.kept:
        warnings.warn(f"{source}: no weights for layer(s) {', '.join(sorted(report.kept))}; "
                      "they keep their initial values", stacklevel=3)
    return report
