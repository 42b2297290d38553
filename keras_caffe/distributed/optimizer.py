"""``DistributedOptimizer``: synchronous data-parallel SGD for any Keras 3 optimizer.

Each worker computes gradients on its own batch; ``apply`` all-reduces them
(Horovod's ring all-reduce; FireCaffe's and Caffe2's rule of summing
gradients instead of pushing them to a parameter server) and hands the
average to the wrapped optimizer, so everything the wrapped optimizer does
(Caffe's ``iter_size``, ``clip_gradients``, weight decay, ``lr_mult``;
YellowFin's curvature and variance statistics) sees the same averaged
gradient on every worker and computes the same update there:

    g = (1/P) sum_r g_r ;  w <- inner_update(w, g)

With ``P`` workers of batch ``B`` this is one worker with batch ``P B`` when
the loss is a mean over the batch, as Caffe's losses are.

All gradients go to Horovod in one ``grouped_allreduce`` (``grouped=True``):
one collective per step, which Horovod packs into its fusion buffer, instead
of one per variable. ``compression="fp16"`` sends float32 gradients as
float16 (half the bytes; the sum is still formed in float16 by Horovod, so
it is an approximation).

Composition, as ``keras.optimizers.LossScaleOptimizer`` wraps its inner
optimizer: ``variables``, ``iterations`` and ``learning_rate`` are the
inner optimizer's, and any other attribute (``tuned_learning_rate``,
``rate_at``...) is looked up on it. Saving stores the inner optimizer's
variables exactly as the inner optimizer alone would; ``from_config``
returns the bare inner optimizer when Horovod is not running with more than
one worker, so a model saved under ``horovodrun`` loads and trains on a
machine without Horovod.

XLA: Horovod's collectives have no XLA kernels (unless Horovod is built
with them, for GPUs only), so the all-reduce cannot sit inside an
XLA-compiled train step. ``keras_caffe.callbacks.BroadcastGlobalState``
turns ``model.jit_compile`` off for ``fit`` with a warning; the Solver
compiles forward/backward and the update with XLA and runs the all-reduce
between them. An XLA-compiled step containing the all-reduce fails loudly
in TensorFlow; it never skips it.

Mixed precision: wrap the ``LossScaleOptimizer``, not the reverse (its
finiteness check must see the reduced gradients, or ranks would disagree
on skipping a step and wait for each other forever).
"""

import keras
import tensorflow as tf

from keras_caffe.distributed._hvd import initialized, loaded
from keras_caffe.errors import ArgumentError
from keras_caffe.optimizers.base import CaffeOptimizer

_OPS = ("average", "sum")
_COMPRESSIONS = (None, "none", "fp16")


class _Hidden:
    """Holds the inner optimizer out of sight of Keras's saving walk, so its
    variables are saved once, under the wrapper's own entry (as if the inner
    optimizer were the model's optimizer)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


@keras.saving.register_keras_serializable(package="keras_caffe")
class DistributedOptimizer(keras.optimizers.Optimizer):
    """All-reduce the gradients across Horovod workers, then apply ``optimizer``.

    Args:
        optimizer: any Keras 3 optimizer (keras-caffe's solvers, YellowFin,
            ``keras.optimizers.*``).
        compression: None (send as computed) or ``"fp16"``.
        op: ``"average"`` (default: the mean gradient, so the learning rate
            keeps its single-worker meaning per sample) or ``"sum"``.
        grouped: one fused collective for all gradients (default), or one
            per variable (``False``; for comparison only).
    """

    def __init__(self, optimizer, compression=None, op="average", grouped=True, name=None,
                 **kwargs):
        owner = "DistributedOptimizer"
        if not isinstance(optimizer, keras.optimizers.Optimizer):
            raise ArgumentError(owner, "optimizer", "must be a Keras 3 optimizer, got "
                                f"{type(optimizer).__name__}")
        if isinstance(optimizer, DistributedOptimizer):
            raise ArgumentError(owner, "optimizer", "is already a DistributedOptimizer")
        if compression not in _COMPRESSIONS:
            raise ArgumentError(owner, "compression", f"must be None or 'fp16', got "
                                f"{compression!r}")
        if op not in _OPS:
            raise ArgumentError(owner, "op", f"must be 'average' or 'sum', got {op!r}")
        if not isinstance(grouped, bool):
            raise ArgumentError(owner, "grouped", f"must be True or False, got {grouped!r}")
        if kwargs:
            raise ArgumentError(owner, ", ".join(sorted(kwargs)),
                                "is not an argument of DistributedOptimizer: set it on the "
                                "wrapped optimizer")
        super().__init__(learning_rate=0.0, name=name or f"distributed_{optimizer.name}")
        self._inner = _Hidden(optimizer)
        # [all-reduce calls, bytes handed to them], counted as they run.
        self._traffic = _Hidden(tf.Variable([0, 0], dtype=tf.int64, trainable=False,
                                            name="allreduce_traffic"))
        self.compression = None if compression == "none" else compression
        self.op = op
        self.grouped = grouped

    # -- the wrapped optimizer -------------------------------------------------------

    @property
    def inner_optimizer(self):
        return self._inner.value

    def __dir__(self):
        # Keras's saving walk visits what dir() lists: hiding the property
        # keeps the inner optimizer's variables saved once, as ``variables``.
        return [name for name in super().__dir__() if name != "inner_optimizer"]

    def __getattr__(self, name):
        # Only reached when normal lookup fails: YellowFin's tuned values,
        # the Caffe solvers' rate_at, caffe_type, ...
        if name.startswith("_") or "_inner" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["_inner"].value, name)

    @property
    def variables(self):
        return self.inner_optimizer.variables

    @property
    def iterations(self):
        return self.inner_optimizer.iterations

    @property
    def learning_rate(self):
        return self.inner_optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, value):
        self.inner_optimizer.learning_rate = value

    @property
    def allreduce_calls(self):
        """All-reduce calls run so far on this worker (one per update when
        ``grouped``, whatever ``iter_size``; 0 with one worker)."""
        return int(self._traffic.value[0].numpy())

    @property
    def allreduce_bytes(self):
        """Bytes this worker handed to its all-reduces so far (after
        compression). A ring all-reduce sends ``2 (P - 1) / P`` times that."""
        return int(self._traffic.value[1].numpy())

    def build(self, var_list):
        if not self.inner_optimizer.built:
            self.inner_optimizer.build(var_list)
        super().build(var_list)

    def scale_loss(self, loss):
        return self.inner_optimizer.scale_loss(loss)

    def finalize_variable_values(self, var_list):
        self.inner_optimizer.finalize_variable_values(var_list)

    # -- the step --------------------------------------------------------------------

    def apply(self, grads, trainable_variables=None):
        """All-reduce ``grads`` across the workers, then the inner optimizer's
        ``apply``. A keras-caffe solver with ``iter_size`` k accumulates its
        k micro-batches locally and all-reduces their sum once per update
        (k times fewer bytes than reducing each micro-batch; the same
        numbers, as the sum is linear)."""
        grads = list(grads)
        if not self.built:
            self.build(trainable_variables)
        inner = self.inner_optimizer
        if isinstance(inner, CaffeOptimizer):
            inner.apply(grads, trainable_variables, reduce=self.reduce_gradients)
        else:
            inner.apply(self.reduce_gradients(grads), trainable_variables)

    def apply_gradients(self, grads_and_vars):
        grads, variables = zip(*grads_and_vars)
        self.apply(list(grads), list(variables))
        return self.iterations

    def reduce_gradients(self, grads):
        """The workers' ``grads`` averaged (or summed): a list like ``grads``,
        None entries kept. One worker: returned unchanged."""
        grads = list(grads)
        hvd = initialized("DistributedOptimizer")
        if hvd.size() == 1:
            return grads
        present = [i for i, g in enumerate(grads) if g is not None]
        tensors = [tf.convert_to_tensor(grads[i]) for i in present]  # IndexedSlices -> dense
        op = hvd.Average if self.op == "average" else hvd.Sum
        compression = hvd.Compression.fp16 if self.compression == "fp16" else hvd.Compression.none
        if self.grouped:
            reduced = hvd.grouped_allreduce(tensors, op=op, compression=compression)
        else:
            reduced = [hvd.allreduce(t, op=op, compression=compression) for t in tensors]
        itemsize = [2 if self.compression == "fp16" and t.dtype.is_floating else t.dtype.size
                    for t in tensors]
        counted = self._traffic.value.assign_add(tf.stack([
            tf.constant(1 if self.grouped else len(tensors), tf.int64),
            tf.add_n([tf.size(t, out_type=tf.int64) * n for t, n in zip(tensors, itemsize)])]))
        with tf.control_dependencies([counted]):
            reduced = [tf.identity(r) for r in reduced]
        out = list(grads)
        for i, value in zip(present, reduced):
            out[i] = value
        return out

    # -- serialization ---------------------------------------------------------------

    def get_config(self):
        return {
            "name": self.name,
            "optimizer": keras.saving.serialize_keras_object(self.inner_optimizer),
            "compression": self.compression,
            "op": self.op,
            "grouped": self.grouped,
        }

    @classmethod
    def from_config(cls, config, custom_objects=None):
        """The inner optimizer, wrapped again only when Horovod runs with
        more than one worker (so loading needs no Horovod)."""
        config = dict(config)
        inner = keras.saving.deserialize_keras_object(config.pop("optimizer"),
                                                      custom_objects=custom_objects)
        hvd = loaded()
        if hvd is None or hvd.size() == 1:
            return inner
        return cls(inner, **config)
