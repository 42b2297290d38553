"""The step behind ``keras_caffe.data_parallel.local_sums`` (its module
docstring says what it does and why): each device's chunk gradients with no
communication, the running ``[N, ...]`` sums sharded over the batch axis, and
on every ``iter_size``-th micro-batch the one all-reduce, then
``CaffeOptimizer.apply_summed``; on JAX arrays, for ``LocalSums.train_step``
and ``local_sums_step`` alike.
"""

import jax
import jax.numpy as jnp
import keras
from jax.sharding import NamedSharding, PartitionSpec

from keras_caffe.errors import ArgumentError
from keras_caffe.optimizers.base import CaffeOptimizer

#: Added to the first word of a dropout seed's state for device chunk c
#: (times c): each chunk draws from its own stream, chunk 0 from the
#: model's own, whose advanced state is kept.
_CHUNK_SEED_STRIDE = 0x9E3779B9


def _batch_axis(owner, distribution):
    """The distribution's mesh, batch axis name and device count on it."""
    if not isinstance(distribution, keras.distribution.DataParallel):
        raise ArgumentError(owner, "distribution",
                            "must be a keras.distribution.DataParallel (set with its scope()), "
                            f"got {type(distribution).__name__}")
    mesh = distribution.device_mesh
    axis = distribution.batch_dim_name
    return mesh.backend_mesh, axis, int(mesh.shape[list(mesh.axis_names).index(axis)])


def _caffe_optimizer(owner, optimizer):
    if not isinstance(optimizer, CaffeOptimizer):
        raise ArgumentError(owner, "optimizer",
                            "must be a keras-caffe solver (SGD, Nesterov, AdaGrad, RMSProp, "
                            f"AdaDelta, Adam, YellowFin), got {type(optimizer).__name__}")
    return optimizer


class LocalAccumulation:
    """Caffe's data-parallel ``iter_size`` step on JAX arrays, the one
    implementation behind ``LocalSums.train_step`` and ``local_sums_step``.

    Built for ``variables`` (the trainable variables, in order), a built
    ``optimizer`` and a ``DataParallel`` distribution; ``sums_layout(v)`` is
    the layout of ``v``'s ``[N, ...]`` sum (sharded over the batch axis).
    """

    def __init__(self, owner, optimizer, variables, distribution):
        self.owner = owner
        self.optimizer = _caffe_optimizer(owner, optimizer)
        self.variables = list(variables)
        self.distribution = distribution
        mesh, self.axis, self.devices = _batch_axis(owner, distribution)
        self.split = NamedSharding(mesh, PartitionSpec(self.axis))
        self.replicated = NamedSharding(mesh, PartitionSpec())
        with distribution.scope():
            self.optimizer.build(self.variables)
        # lr_mult 0: Caffe computes no gradient, so none is summed or reduced
        self.summed = [not self.optimizer.frozen(v) for v in self.variables]
        self.iter_size = self.optimizer.iter_size

    def sums_layout(self, variable):
        return keras.distribution.TensorLayout([self.axis] + [None] * len(variable.shape),
                                               self.distribution.device_mesh)

    def summed_variables(self):
        return [v for v, s in zip(self.variables, self.summed) if s]

    def _chunks(self, data):
        """Each array of ``data`` as ``[N, B/N, ...]``, chunk c on device c."""
        def split(array):
            if array is None:
                return None
            rows = array.shape[0]
            if rows % self.devices:
                raise ArgumentError(self.owner, "batch",
                                    f"has {rows} rows, not a multiple of the {self.devices} "
                                    f"devices on the batch axis {self.axis!r}")
            chunks = jnp.reshape(array, (self.devices, rows // self.devices) + array.shape[1:])
            return jax.lax.with_sharding_constraint(chunks, self.split)
        return jax.tree_util.tree_map(split, data, is_leaf=lambda a: a is None)

    def _chunk_seeds(self, value):
        offsets = jnp.arange(self.devices, dtype="uint32") * jnp.uint32(_CHUNK_SEED_STRIDE)
        stacked = value[None] + jnp.stack([offsets] + [jnp.zeros_like(offsets)] *
                                          (value.shape[0] - 1), axis=1)
        return jax.lax.with_sharding_constraint(stacked, self.split)

    def gradients(self, forward, trainable, non_trainable, seeds, data):
        """Per-device chunk gradients ``[N, ...]`` (None where frozen), the
        chunks' forward outputs, and the forward's new non-trainable state.

        ``forward(trainable, non_trainable, *chunk_data)`` returns
        ``(loss, (outputs, new_non_trainable))`` for one chunk; ``seeds``
        flags the non-trainable entries that are random seed states."""
        devices = self.devices
        chunk_data = self._chunks(data)
        inputs = [self._chunk_seeds(v) if s else v for v, s in zip(non_trainable, seeds)]
        axes = [0 if s else None for s in seeds]

        def chunk(weights, state, part):
            def loss(w):
                value, (outputs, new_state) = forward(w, state, *part)
                return value / devices, (outputs, new_state)
            grads, (outputs, new_state) = jax.grad(loss, has_aux=True)(weights)
            grads = [g if s else None for g, s in zip(grads, self.summed)]
            # None: left as it was (no state to combine across devices)
            return grads, outputs, [None if n is o else n for n, o in zip(new_state, state)]

        grads, outputs, new_state = jax.vmap(chunk, in_axes=(None, axes, 0))(
            trainable, inputs, chunk_data)
        grads = [None if g is None else jax.lax.with_sharding_constraint(g, self.split)
                 for g in grads]
        combined = []
        for old, new in zip(non_trainable, new_state):
            if new is None:
                combined.append(old)
            elif jnp.issubdtype(new.dtype, jnp.floating):  # moving statistics: the mean
                combined.append(jax.lax.with_sharding_constraint(jnp.mean(new, axis=0),
                                                                 self.replicated))
            else:  # seed states and counters: chunk 0's (the model's own stream)
                combined.append(jax.lax.with_sharding_constraint(new[0], self.replicated))
        return grads, outputs, combined

    def apply(self, trainable, optimizer_values, count, sums, grads):
        """The micro-step: add ``grads`` to the local ``sums``; on every
        ``iter_size``-th call all-reduce them and update. Returns the new
        ``(trainable, optimizer_values, count, sums)``."""
        if self.iter_size == 1:
            trainable, optimizer_values = self._update(trainable, optimizer_values, grads)
            return trainable, optimizer_values, count, sums
        kept = [g for g in grads if g is not None]
        added = [jax.lax.with_sharding_constraint(s + g, self.split) for s, g in zip(sums, kept)]

        def update(operands):
            weights, values, totals = operands
            weights, values = self._update(weights, values, self._spread(totals))
            return weights, values, [jnp.zeros_like(s) for s in totals]

        def accumulate(operands):
            return operands

        is_update = (count + 1) % self.iter_size == 0
        trainable, optimizer_values, sums = jax.lax.cond(
            is_update, update, accumulate, (list(trainable), list(optimizer_values), added))
        return trainable, optimizer_values, count + 1, sums

    def _spread(self, kept):
        """``kept`` (the summed variables' entries) back in ``variables``'
        order, None where frozen."""
        found = iter(kept)
        return [next(found) if s else None for s in self.summed]

    def _update(self, trainable, optimizer_values, grads):
        """The one all-reduce (the sum over the devices' axis), then Caffe's
        update through ``apply_summed`` on these values."""
        totals = [None if g is None else
                  jax.lax.with_sharding_constraint(jnp.sum(g, axis=0), self.replicated)
                  for g in grads]
        optimizer = self.optimizer
        mapping = (list(zip(optimizer.variables, optimizer_values))
                   + list(zip(self.variables, trainable)))
        with keras.StatelessScope(state_mapping=mapping) as scope:
            optimizer.apply_summed(totals, self.variables)

        def current(variable, old):
            value = scope.get_current_value(variable)
            return old if value is None else value
        return ([current(v, w) for v, w in zip(self.variables, trainable)],
                [current(v, w) for v, w in zip(optimizer.variables, optimizer_values)])


def seed_flags(variables):
    """Which variables are random seed states (Keras's ``SeedGenerator``)."""
    return [v.name == "seed_generator_state" for v in variables]
