"""``iter_size`` under ``keras.distribution.DataParallel`` as Caffe's
multi-GPU solvers run it: each device sums its own micro-batch gradients, and
the devices' sums are all-reduced ONCE per update, not once per micro-batch.

Keras's JAX trainer takes each micro-batch's gradient of the global batch, so
with ``iter_size`` k every train step all-reduces (k reductions per update).
Here the global batch of B rows is reshaped to ``[N, B/N, ...]`` (N devices
on the distribution's batch axis, row blocks in the order Keras shards them),
``jax.vmap`` of ``jax.grad`` over the chunks gives each device the gradient
of its chunk's share of the loss with no communication, and ``[N, ...]``
sums sharded over the batch axis keep each device's running sum on that
device. On the ``iter_size``-th micro-batch the sum over axis 0 (the one
all-reduce) goes to ``CaffeOptimizer.apply_summed``: clipping on the reduced
sum, ``iter_size``'s normalization, weight decay with ``decay_mult``,
``lr_mult``, frozen (``lr_mult`` 0) parameters, YellowFin's statistics, once
per update as on one device. The update is a ``lax.cond`` branch, so the
micro-batches between updates compile to no gradient all-reduce.

- ``with_local_sums(model)``: a ``LocalSums`` model (the same inputs, outputs,
  layers and variables) whose ``train_step`` does this in ``model.fit``.
- ``local_sums_step(model, loss_fn)``: the same step for a custom training
  loop on Keras's stateless JAX API.

Semantics that differ from Keras's global-batch step (Caffe's, as on
several GPUs): each device normalizes by its own chunk's batch statistics
(BatchNormalization), and a forward pass's float state (moving mean and
variance) is the mean of the devices' updated values, once per step; each
device chunk draws its own random numbers (Dropout). The loss must be a mean
over the batch's rows (Keras's ``sum_over_batch_size``), so that the chunk
losses' mean is the global batch's. docs/distributed.md, "JAX".
"""

import jax
import jax.numpy as jnp
import keras

from keras_caffe.data_parallel.local_step import LocalAccumulation, seed_flags
from keras_caffe.errors import ArgumentError

OWNER = "keras_caffe.data_parallel.with_local_sums"
STEP_OWNER = "keras_caffe.data_parallel.local_sums_step"


# -- model.fit ----------------------------------------------------------------


@keras.saving.register_keras_serializable(package="keras_caffe")
class LocalSums(keras.Model):
    """A functional model whose ``model.fit`` under ``DataParallel`` sums
    ``iter_size``'s micro-batch gradients on each device and all-reduces them
    once per update (module docstring). Build it with ``with_local_sums(model)``.

    ``compile`` under the distribution's scope decides: with a
    ``DataParallel`` over N > 1 devices and a keras-caffe solver with
    ``iter_size`` > 1 it creates the per-device sums (non-trainable
    variables ``local_sum_<i>``, ``[N, ...]`` sharded over the batch axis,
    and the micro-step ``local_sums_micro_step``); otherwise ``train_step``
    is Keras's own (the same numbers: no distribution, one device, or
    ``iter_size`` 1, where every step updates and reduces once anyway).
    The sums are not saved (``save_weights``, ``.keras``): between updates
    they hold a part of an iteration, which Caffe's snapshots never do."""

    def __init__(self, inputs, outputs, name=None, **kwargs):
        # Functional's own signature, so Keras saves and revives it as one
        super().__init__(inputs=inputs, outputs=outputs, name=name, **kwargs)
        self._accumulation = None

    def compile(self, optimizer="rmsprop", *args, **kwargs):
        super().compile(optimizer, *args, **kwargs)
        self._accumulation = None
        distribution = keras.distribution.distribution()
        if distribution is None:
            return
        accumulation = LocalAccumulation(OWNER, self.optimizer, self.trainable_variables,
                                         distribution)
        if accumulation.devices == 1 or accumulation.iter_size == 1:
            return
        existing = getattr(self, "local_sums", None)
        shapes = [(accumulation.devices,) + tuple(v.shape) for v in accumulation.summed_variables()]
        if existing is not None and [tuple(v.shape) for v in existing] != shapes:
            raise ArgumentError(OWNER, "optimizer",
                                "compiled again with other frozen parameters or devices than "
                                "the first compile's: build a new model with with_local_sums")
        if existing is None:
            with distribution.scope():
                self.local_sums = [
                    keras.Variable(keras.initializers.Zeros(),
                                   shape=shape, dtype=v.dtype, trainable=False,
                                   name=f"local_sum_{i}", layout=accumulation.sums_layout(v))
                    for i, (v, shape) in enumerate(zip(accumulation.summed_variables(), shapes))]
                self.local_sums_micro_step = keras.Variable(
                    0, dtype="int32", trainable=False, name="local_sums_micro_step")
        self._accumulation = accumulation

    def compile_from_config(self, config):
        """Keras's: ``compile`` with the saved arguments (a loaded model
        creates its sums as ``compile`` does, under the current distribution)."""
        self.compile(**keras.saving.deserialize_keras_object(config))
        if self.built:
            self.optimizer.build(self.trainable_variables)

    def fit(self, x=None, y=None, batch_size=None, *args, **kwargs):
        """Keras's ``fit``; with the per-device sums, a global batch (every
        process's ``batch_size`` rows together) or a last partial batch of
        in-memory ``x`` that the devices cannot share evenly is refused."""
        accumulation = self._accumulation
        rows = getattr(x, "shape", None)
        if accumulation is not None and batch_size is not None:
            processes = jax.process_count()
            last = rows[0] % batch_size if rows else 0
            for name, size in (("batch_size", batch_size), ("x", last)):
                if (size * processes) % accumulation.devices:
                    raise ArgumentError(
                        OWNER, name,
                        f"gives global batches of {size * processes} rows, not a multiple of "
                        f"the {accumulation.devices} devices on the batch axis "
                        f"{accumulation.axis!r}")
        return super().fit(x, y, batch_size, *args, **kwargs)

    def train_step(self, state, data):
        accumulation = self._accumulation
        if accumulation is None:
            return super().train_step(state, data)
        if keras.distribution.distribution() is not accumulation.distribution:
            raise ArgumentError(OWNER, "distribution",
                                f"is not the DataParallel ({accumulation.devices} devices) the "
                                "model was compiled under: fit under its scope")
        trainable, non_trainable, optimizer_values, metrics_values = state
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        sums_vars, step_var = self.local_sums, self.local_sums_micro_step
        own = {id(v): i for i, v in enumerate(self.non_trainable_variables)}
        sum_index = [own[id(v)] for v in sums_vars]
        step_index = own[id(step_var)]

        def forward(weights, values, x, y, sample_weight):
            loss, (unscaled, y_pred, new_values, new_metrics) = self.compute_loss_and_updates(
                weights, values, metrics_values, x, y, sample_weight, training=True,
                optimizer_variables=optimizer_values)
            # the loss's own trackers (a multi-output model's per-output
            # losses): None where the chunk left a value as it was
            changed = [None if n is o else n for n, o in zip(new_metrics, metrics_values)]
            return loss, ((unscaled, y_pred, changed), new_values)

        grads, (losses, y_pred, chunk_metrics), non_trainable = accumulation.gradients(
            forward, trainable, non_trainable, seed_flags(self.non_trainable_variables),
            (x, y, sample_weight))
        trainable, optimizer_values, step, sums = accumulation.apply(
            trainable, optimizer_values, non_trainable[step_index],
            [non_trainable[i] for i in sum_index], grads)
        non_trainable = list(non_trainable)
        for i, value in zip(sum_index, sums):
            non_trainable[i] = value
        non_trainable[step_index] = step
        # a tracker's totals and counts: what every chunk added
        metrics_values = [old if new is None else old + jnp.sum(new - old, axis=0)
                          for old, new in zip(metrics_values, chunk_metrics)]
        y_pred = jax.tree_util.tree_map(
            lambda a: jnp.reshape(a, (-1,) + a.shape[2:]), y_pred)
        logs, metrics_values = self._metrics_logs(metrics_values, jnp.mean(losses), x, y,
                                                  y_pred, sample_weight)
        return logs, (trainable, non_trainable, optimizer_values, metrics_values)

    def _metrics_logs(self, metrics_values, loss, x, y, y_pred, sample_weight):
        """Keras's default: the loss tracker gets the global batch's loss
        (weighted by its rows), the compiled metrics the global batch."""
        mapping = list(zip(self.metrics_variables, metrics_values))
        rows = next(a for a in jax.tree_util.tree_leaves(x)).shape[0]
        with keras.StatelessScope(state_mapping=mapping) as scope:
            tracker = self.metrics[0] if self.metrics else None
            if tracker is not None and tracker.name == "loss":
                tracker.update_state(loss, sample_weight=rows)
            logs = self.compute_metrics(x, y, y_pred, sample_weight)
        values = []
        for variable, old in zip(self.metrics_variables, metrics_values):
            value = scope.get_current_value(variable)
            values.append(old if value is None else value)
        return logs, values

    def save_own_variables(self, store):
        """Nothing: the model's own variables are the per-device sums."""

    def load_own_variables(self, store):
        """Nothing: the per-device sums start at zero."""


def with_local_sums(model):
    """A ``LocalSums`` model over ``model``'s layers (a functional or
    ``Sequential`` model): the same inputs, outputs and variables, so
    training it trains ``model``. Compile and fit it under the
    ``DataParallel`` distribution's scope::

        distribution = keras.distribution.DataParallel()
        with distribution.scope():
            net = build_net()                      # functional or Sequential
            trainer = keras_caffe.data_parallel.with_local_sums(net)
            trainer.compile(optimizer=keras_caffe.SGD(learning_rate=0.01, iter_size=2),
                            loss="mse", metrics=["mae"])
            trainer.fit(x, y, batch_size=global_batch)
        net.save_weights("net.weights.h5")        # the same variables
    """
    if not isinstance(model, keras.Model):
        raise ArgumentError(OWNER, "model",
                            f"must be a keras.Model, got {type(model).__name__}")
    try:
        inputs, outputs = model.inputs, model.outputs
    except (AttributeError, ValueError):
        inputs = outputs = None
    if not inputs or not outputs:
        raise ArgumentError(OWNER, "model",
                            f"must be a built functional or Sequential model, got "
                            f"{type(model).__name__} {model.name!r} without symbolic inputs "
                            "and outputs (a subclassed model: train it with "
                            "keras_caffe.data_parallel.local_sums_step)")
    return LocalSums(inputs=inputs, outputs=outputs, name=f"{model.name}_local_sums")


# -- a custom training loop ---------------------------------------------------


class StatelessStep:
    """``local_sums_step``'s step: ``losses, state = step(state, (x, y))``
    under ``jax.jit``; ``state = step.initial_state()``;
    ``step.assign(state)`` writes the weights and the optimizer's and
    model's state back to their variables."""

    def __init__(self, model, loss_fn, optimizer, distribution):
        self.model = model
        self.loss_fn = loss_fn
        self.accumulation = LocalAccumulation(STEP_OWNER, optimizer, model.trainable_variables,
                                              distribution)
        self.seeds = seed_flags(model.non_trainable_variables)

    def initial_state(self):
        """``(trainable, non_trainable, optimizer_variables, (sums, micro_step))``:
        the variables' values, the sums zero, sharded over the batch axis."""
        accumulation = self.accumulation
        model, optimizer = self.model, accumulation.optimizer
        sums = []
        if accumulation.iter_size > 1:
            sums = [jax.device_put(jnp.zeros((accumulation.devices,) + tuple(v.shape), v.dtype),
                                   accumulation.split)
                    for v in accumulation.summed_variables()]
        step = jax.device_put(jnp.zeros((), "int32"), accumulation.replicated)
        return ([v.value for v in model.trainable_variables],
                [v.value for v in model.non_trainable_variables],
                [v.value for v in optimizer.variables], (sums, step))

    def __call__(self, state, data):
        """One micro-batch: ``data`` is ``(x, y)`` or ``(x, y, sample_weight)``
        of the global batch. Returns each device chunk's loss (shape
        ``[N]``; their mean is the global batch's loss, left unreduced so
        that a step between updates communicates nothing) and the new state."""
        trainable, non_trainable, optimizer_values, (sums, step) = state
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        model, loss_fn = self.model, self.loss_fn

        def forward(weights, values, x, y, sample_weight):
            y_pred, new_values = model.stateless_call(weights, values, x, training=True)
            loss = (loss_fn(y, y_pred) if sample_weight is None
                    else loss_fn(y, y_pred, sample_weight=sample_weight))
            return loss, (loss, new_values)

        grads, losses, non_trainable = self.accumulation.gradients(
            forward, trainable, non_trainable, self.seeds, (x, y, sample_weight))
        trainable, optimizer_values, step, sums = self.accumulation.apply(
            trainable, optimizer_values, step, sums, grads)
        return losses, (trainable, non_trainable, optimizer_values, (sums, step))

    def assign(self, state):
        trainable, non_trainable, optimizer_values, _ = state
        for variables, values in ((self.model.trainable_variables, trainable),
                                  (self.model.non_trainable_variables, non_trainable),
                                  (self.accumulation.optimizer.variables, optimizer_values)):
            for variable, value in zip(variables, values):
                variable.assign(value)


def local_sums_step(model, loss_fn, optimizer=None, distribution=None):
    """The ``LocalSums`` step for a custom training loop on Keras's stateless
    JAX API: any built model (subclassed ones too), ``loss_fn(y_true,
    y_pred[, sample_weight])`` a mean over the batch (a ``keras.losses.Loss``
    with its default reduction), ``optimizer`` a keras-caffe solver (default
    ``model.optimizer``), ``distribution`` a ``DataParallel`` (default the
    current one)::

        with distribution.scope():
            step = keras_caffe.data_parallel.local_sums_step(model, keras.losses.MeanSquaredError(),
                                                            keras_caffe.SGD(0.01, iter_size=2))
            state = step.initial_state()
            train = jax.jit(step, donate_argnums=0)
            for x, y in batches:                    # global batches
                losses, state = train(state, (x, y))
            step.assign(state)
    """
    if not isinstance(model, keras.Model) or not model.built:
        raise ArgumentError(STEP_OWNER, "model",
                            f"must be a built keras.Model, got {type(model).__name__}")
    if not callable(loss_fn):
        raise ArgumentError(STEP_OWNER, "loss_fn",
                            f"must be callable (y_true, y_pred), got {type(loss_fn).__name__}")
    optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
    distribution = distribution if distribution is not None else keras.distribution.distribution()
    return StatelessStep(model, loss_fn, optimizer, distribution)
