"""Caffe's learnable parameters of an imported model, and the solver history
blobs that follow them.

Caffe keeps one history blob per learnable parameter and slot, in
``Net::learnable_params()`` order: the net's layers in prototxt order, each
layer's blobs in order, including blobs Caffe never updates (lr_mult 0, such
as BatchNorm's three statistics). A solver with k slots stores
``[slot 0 of every param..., slot 1 of every param..., ...]``: SGD, Nesterov,
AdaGrad and RMSProp keep one (``history``); AdaDelta keeps ``history`` then
``update_history`` (``AdaDeltaPreSolve`` appends the second set;
``ComputeUpdateValue`` reads ``history_[update_history_offset + param_id]``);
Adam keeps ``m`` then ``v`` (``AdamPreSolve``, ``val_v = history_[param_id +
update_history_offset]``). References: caffe/src/caffe/solvers/sgd_solver.cpp,
adadelta_solver.cpp, adam_solver.cpp.

Slots live in Keras's layout (a Dense kernel is (in, out)); they are converted
to and from Caffe's with the owning layer's ``caffe_from_keras_weights`` /
``keras_weights_from_caffe``, the same permutations as its weights.
"""

import keras
import numpy as np
from keras import ops

from keras_caffe.importers.net.blobs import caffe_parts
from keras_caffe.importers.snapshots.file_io import SnapshotError
from keras_caffe.layers import CaffeBlobs
from keras_caffe.optimizers.base import CaffeOptimizer


class Param:
    """One Caffe learnable parameter: ``caffe_layer``'s blob ``blob``, held by
    ``layer.caffe_variables()[index]`` with Caffe shape ``shape``."""

    def __init__(self, caffe_layer, blob, layer, index, shape):
        self.caffe_layer, self.blob, self.layer, self.index = caffe_layer, blob, layer, index
        self.shape = tuple(shape)

    @property
    def variable(self):
        return self.layer.caffe_variables()[self.index]

    def __str__(self):
        return f"layer {self.caffe_layer!r} blob {self.blob}"


def caffe_optimizer(optimizer, path):
    """The Caffe solver inside ``optimizer`` (unwrapping a LossScaleOptimizer),
    or ``SnapshotError`` for one without a Caffe solver type."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    if not isinstance(inner, CaffeOptimizer) or not inner.caffe_type or not inner.slot_names:
        raise SnapshotError(path, f"{type(inner).__name__} has no Caffe solver state "
                            "(Caffe formats hold SGD, Nesterov, AdaGrad, RMSProp, AdaDelta "
                            "and Adam); use format='keras'")
    return inner


def learnable_params(model, path):
    """The model's Caffe learnable parameters in Caffe's order.

    The order is ``model.caffe_layer_order`` (the prototxt's, set by
    ``import_model``); a model without it (rebuilt from a .keras file) falls
    back to its layers' order. Refuses a model without Caffe layers or with
    weights outside them (Caffe's files could not hold those).
    """
    parts = caffe_parts(model)
    if not any(count for _, _, count, _ in parts.values()):
        raise SnapshotError(path, f"model {model.name!r} has no layers holding Caffe blobs; "
                            "Caffe formats need a model from keras_caffe.import_model "
                            "(use format='keras')")
    covered = {id(v) for layer in model.layers if isinstance(layer, CaffeBlobs)
               for v in layer.caffe_variables()}
    for weight in model.weights:
        if id(weight) not in covered:
            raise SnapshotError(path, f"weight {weight.path!r} is outside the model's Caffe "
                                "layers, so a Caffe snapshot cannot hold it; use format='keras'")
    order = getattr(model, "caffe_layer_order", None) or list(parts)
    params = []
    for name in order:
        if name not in parts:
            continue
        layer, start, count, _ = parts[name]
        shapes = layer.caffe_blob_shapes()
        params.extend(Param(name, i, layer, start + i, shapes[start + i]) for i in range(count))
    return params


def layer_order(params):
    """The distinct Keras layers of ``params``, first appearance first."""
    return list({id(p.layer): p.layer for p in params}.values())


def slot_blobs(path, optimizer, params):
    """Caffe's history list: for each slot name, one Caffe-layout array per param.

    Variables the optimizer does not update (not trainable in Keras, such as
    BatchNorm's statistics) get zeros, as Caffe's never-updated history is.
    """
    per_layer = {}
    for layer in layer_order(params):
        variables = layer.caffe_variables()
        for slot in optimizer.slot_names:
            values = [_slot_value(path, optimizer, slot, v) for v in variables]
            per_layer[(id(layer), slot)] = layer.caffe_from_keras_weights(values)
    return [np.asarray(per_layer[(id(p.layer), slot)][p.index], np.float32).reshape(p.shape)
            for slot in optimizer.slot_names for p in params]


def _slot_value(path, optimizer, slot, variable):
    if not variable.trainable:
        return np.zeros(variable.shape, np.float32)
    try:
        slot_variable = optimizer.slot(getattr(optimizer, slot), variable)
    except KeyError:
        raise SnapshotError(path, f"the optimizer was not built with the model's variable "
                            f"{variable.path!r}") from None
    # a copy: on PyTorch the converted tensor shares the variable's storage
    return np.array(ops.convert_to_numpy(slot_variable), copy=True)


def slot_assignments(optimizer, params, history):
    """``[(slot variable, Keras-layout value)]`` from Caffe's history list
    (already checked against ``params``); statistics' history is skipped."""
    n = len(params)
    out = []
    for s, slot in enumerate(optimizer.slot_names):
        blobs = history[s * n:(s + 1) * n]
        for layer in layer_order(params):
            variables = layer.caffe_variables()
            caffe = [np.zeros(shape, np.float32) for shape in layer.caffe_blob_shapes()]
            for p, blob in zip(params, blobs):
                if p.layer is layer:
                    caffe[p.index] = blob
            for variable, value in zip(variables, layer.keras_weights_from_caffe(caffe)):
                if variable.trainable:
                    out.append((optimizer.slot(getattr(optimizer, slot), variable), value))
    return out


def check_history(path, optimizer, params, history, stored_slots=None):
    """Refuse history that does not fit the net and solver, naming the first
    blob whose shape differs (another net) or the slot mismatch (another
    solver type)."""
    k, n = len(optimizer.slot_names), len(params)
    kind = type(optimizer).__name__
    if stored_slots is not None and list(stored_slots) != list(optimizer.slot_names):
        raise SnapshotError(path, f"holds the state of a solver with slots {list(stored_slots)}; "
                            f"{kind} keeps {list(optimizer.slot_names)}")
    for i, blob in enumerate(history[:k * n]):
        p = params[i % n]
        if tuple(blob.shape) != p.shape and not legacy_same(blob.shape, p.shape):
            raise SnapshotError(path, f"snapshot from another net: history blob {i} has shape "
                                f"{tuple(blob.shape)}, the net's {p} needs {p.shape}")
    if len(history) != k * n:
        if len(history) % n == 0 and len(history) > 0:
            raise SnapshotError(path, f"holds {len(history)} history blobs, "
                                f"{len(history) // n} per learnable blob; {kind} keeps {k} "
                                f"({', '.join(optimizer.slot_names)}): the state of another "
                                "solver type")
        raise SnapshotError(path, f"snapshot from another net: {len(history)} history blobs, "
                            f"the net has {n} learnable blobs and {kind} keeps {k} per blob "
                            f"({k * n} expected)")


def legacy_same(got, expected):
    """Caffe's legacy 4-D (num, channels, height, width) blobs of equal size."""
    return len(got) == 4 and len(expected) != 4 and int(np.prod(got)) == int(np.prod(expected))


def reset_accumulation(optimizer):
    """After restoring ``iterations``: no micro-batch gradient is pending (Caffe
    snapshots between iterations), so iter_size's sums are zero and its
    micro-step counter is ``iterations * iter_size``."""
    step = getattr(optimizer, "_micro_step", None)
    if step is not None:
        step.assign(int(optimizer.iterations.numpy()) * optimizer.iter_size)
        for total in optimizer._accumulators:
            total.assign(keras.ops.zeros(total.shape, total.dtype))


def pending_accumulation(optimizer):
    """True between the micro-batches of one iteration (iter_size > 1)."""
    step = getattr(optimizer, "_micro_step", None)
    return step is not None and int(step.numpy()) % optimizer.iter_size != 0
