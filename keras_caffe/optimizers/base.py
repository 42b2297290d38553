"""The Caffe parts shared by every keras-caffe solver.

``CaffeOptimizer.apply`` turns raw gradients into the gradients Caffe's
``SGDSolver::ApplyUpdate`` hands to ``ComputeUpdateValue``, in Caffe's order:

0. A parameter with ``lr_mult`` 0 has a gradient of 0 (Caffe computes none).
1. ``iter_size``: micro-batch gradients are summed; the update runs on every
   ``iter_size``-th call, and ``iterations`` counts updates, so schedules see
   Caffe's iteration number.
2. ``clip_gradients``: if the global L2 norm of the summed gradients exceeds
   it, all gradients are scaled by ``clip_gradients / norm``.
3. Normalize: divide by ``iter_size``.
4. Regularize: ``g += weight_decay * decay_mult * w`` (L2) or
   ``g += weight_decay * decay_mult * sign(w)`` (L1). This is Caffe's
   coupled weight decay, not Keras's decoupled ``weight_decay``.

Subclasses implement ``update_step`` with the solver's formula, using
``local_rate`` (the schedule's rate times the variable's ``lr_mult``).

Every Keras backend runs the same ``keras.ops`` formulas. ``iter_size``'s
"update on every ``iter_size``-th call" is a ``cond`` whose branch assigns
variables on TensorFlow (graph) and PyTorch (eager); on JAX, where a traced
branch cannot assign, the update is computed on every call and its results
kept only on an update call (``select_update``), as Keras's own JAX optimizer
does for ``gradient_accumulation_steps``.

Under ``tf.distribute.MirroredStrategy`` with several replicas (TensorFlow's
backend) the pipeline runs once per update on the sum of the replicas'
gradients (the global batch's), in cross-replica context: see
``keras_caffe.optimizers.replicas``, imported only on that backend.
"""

from __future__ import annotations

from collections.abc import Mapping

import keras
from keras import ops

from keras_caffe._checks import check_int, check_number
from keras_caffe._floats import float32_value, shortest, shown
from keras_caffe.errors import ArgumentError, DistributedError, KerasCaffeError
from keras_caffe.optimizers import multipliers

# Keras options whose semantics differ from Caffe's, with what to use instead.
_REFUSED = {
    "global_clipnorm": "use `clip_gradients` (Caffe's global-norm clipping)",
    "clipnorm": "use `clip_gradients` (Caffe's global-norm clipping)",
    "clipvalue": "use `clip_gradients` (Caffe's global-norm clipping)",
    "gradient_accumulation_steps": (
        "use `iter_size` (Caffe's accumulation: sum, clip, then divide)"
    ),
}


#: The arguments every Caffe solver takes, keyword-only, after its own.
SHARED_ARGUMENTS = ("weight_decay", "regularization_type", "clip_gradients", "iter_size",
                    "lr_mult", "decay_mult", "float32_fields")


def shared_arguments(arguments: Mapping) -> dict:
    """The ``SHARED_ARGUMENTS`` of a subclass's ``__init__`` (its ``locals()``),
    to hand to ``CaffeOptimizer.__init__``."""
    return {name: arguments[name] for name in SHARED_ARGUMENTS}


class CaffeOptimizer(keras.optimizers.Optimizer):
    """Base class of the Caffe solvers.

    Args:
        learning_rate: float or a ``LearningRateSchedule`` (``base_lr`` with
            an ``lr_policy``: see ``keras_caffe.schedules``).
        weight_decay: Caffe's ``weight_decay``, added to the gradient.
        regularization_type: ``"L2"`` or ``"L1"``.
        clip_gradients: clip the global gradient L2 norm to this; ``None``
            turns clipping off (Caffe's ``-1`` in a solver file means None).
        iter_size: accumulate gradients over this many batches per update.
        lr_mult, decay_mult: dicts from variable path or glob pattern to a
            float, Caffe's per-parameter ``param { lr_mult decay_mult }``.
        float32_fields: the float arguments are a solver file's ``float``
            fields (``optimizer_from_solver`` sets it): they are rounded to
            float32, as Caffe holds them, and ``get_config``/``repr`` show
            the shortest decimal of that float32 (``0.9``, not
            ``0.8999999761581421``). Otherwise they are used as given.
        **kwargs: ``name``, ``use_ema``, ``ema_momentum``,
            ``ema_overwrite_frequency``, ``loss_scale_factor`` as for any Keras
            optimizer. Keras's ``clipnorm``, ``clipvalue``,
            ``global_clipnorm`` and ``gradient_accumulation_steps`` are
            refused: their semantics are not Caffe's.
    """

    #: The solver file's ``type`` string.
    caffe_type: str | None = None
    #: SolverParameter fields the solver takes besides the shared ones.
    solver_fields: tuple[str, ...] = ()
    #: Per-variable state (Caffe's history blobs): each name becomes an
    #: attribute holding one optimizer variable per model variable.
    slot_names: tuple[str, ...] = ()

    def __init__(
        self,
        learning_rate: float | keras.optimizers.schedules.LearningRateSchedule = 0.01,
        *,
        weight_decay: float = 0.0,
        regularization_type: str = "L2",
        clip_gradients: float | None = None,
        iter_size: int = 1,
        lr_mult: Mapping[str, float] | None = None,
        decay_mult: Mapping[str, float] | None = None,
        float32_fields: bool = False,
        **kwargs,
    ):
        owner = type(self).__name__
        if not isinstance(float32_fields, bool):
            raise ArgumentError(owner, "float32_fields",
                                f"must be True or False, got {float32_fields!r}")
        for key, advice in _REFUSED.items():
            if kwargs.pop(key, None) is not None:
                raise ArgumentError(owner, key, f"is not supported: {advice}")
        if not isinstance(learning_rate, keras.optimizers.schedules.LearningRateSchedule) \
                and not callable(learning_rate):
            learning_rate = check_number(owner, "learning_rate", learning_rate)
        super().__init__(learning_rate=learning_rate, **kwargs)
        self._rate_source = learning_rate
        self._float32_fields = float32_fields
        self.caffe_weight_decay = self.caffe_float("weight_decay", weight_decay)
        if regularization_type not in ("L2", "L1"):
            raise ArgumentError(
                owner, "regularization_type", f"must be 'L2' or 'L1', got {regularization_type!r}"
            )
        self.regularization_type = regularization_type
        if clip_gradients is not None:
            clip_gradients = self.caffe_float("clip_gradients", clip_gradients)
        self.clip_gradients = clip_gradients
        self.iter_size = check_int(owner, "iter_size", iter_size, low=1)
        self.lr_mult = multipliers.validate(owner, "lr_mult", lr_mult)
        self.decay_mult = multipliers.validate(owner, "decay_mult", decay_mult)

    @property
    def float32_fields(self) -> bool:
        """Whether the float arguments are a solver file's float32 fields."""
        return self._float32_fields

    def caffe_float(self, name, value, **limits):
        """A float argument checked by ``check_number(**limits)``, rounded to
        float32 when it is a solver file's (``float32_fields``)."""
        value = check_number(type(self).__name__, name, value, **limits)
        return float32_value(value) if self._float32_fields else value

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        owner = type(self).__name__
        # Bypasses Keras's attribute tracking, which would list the model's
        # variables among the optimizer's own.
        object.__setattr__(self, "_built_variables", list(variables))
        self._lr_mults = multipliers.resolve(owner, "lr_mult", self.lr_mult, variables)
        self._decay_mults = multipliers.resolve(owner, "decay_mult", self.decay_mult, variables)
        if self.iter_size > 1:
            self._micro_step = self.add_variable(
                shape=(), dtype="int", name="iter_size_micro_step"  # as Keras's iterations
            )
            self._accumulators = self.add_optimizer_variables(variables, "iter_size_sum")
        if self.slot_names:
            slots = self.add_optimizer_variables(variables, list(self.slot_names))
            for name, per_variable in zip(self.slot_names, slots):
                setattr(self, name, per_variable)

    # -- per-variable helpers for update_step -------------------------------

    def local_rate(self, learning_rate, variable):
        """Caffe's ``local_rate``: the schedule's rate times ``lr_mult``."""
        rate = ops.cast(learning_rate, variable.dtype)
        mult = self._lr_mults[self._get_variable_index(variable)]
        return rate if mult == 1.0 else rate * mult

    def rate_at(self, iteration):
        """The rate (``base_lr`` under the lr policy) at Caffe iteration
        ``iteration``, as a Python float: what Caffe prints as ``lr``."""
        rate = self._rate_source
        if isinstance(rate, keras.optimizers.schedules.LearningRateSchedule):
            return float(rate(iteration))
        return float(ops.convert_to_numpy(self.learning_rate))

    def slot(self, slots, variable):
        """The entry of a list of optimizer variables for ``variable``."""
        return slots[self._get_variable_index(variable)]

    # -- Caffe's gradient pipeline -----------------------------------------

    def apply(self, grads, trainable_variables=None, reduce=None):
        """Keras's ``apply`` through Caffe's pipeline. ``reduce``: an
        all-reduce run once per update on the summed gradients (see
        ``caffe_apply``); ``DistributedOptimizer`` passes its own."""
        prepared = self._prepare(grads, trainable_variables)
        if prepared is None:
            return super().apply(grads, trainable_variables)  # Keras's own error
        return self.caffe_apply(*prepared, reduce=reduce)

    def apply_summed(self, grads, trainable_variables=None):
        """One Caffe iteration's update from the SUM of its ``iter_size``
        passes' gradients (formed elsewhere, e.g. all-reduced across workers
        once per iteration): clip, normalize, regularize and update, as
        ``apply`` does on its ``iter_size``-th call; the accumulators are not
        used and ``iter_size``'s micro-step counter moves by ``iter_size``."""
        prepared = self._prepare(grads, trainable_variables)
        if prepared is None:
            return super().apply(grads, trainable_variables)  # Keras's own error
        grads, variables = prepared
        context = _replica_context()
        if context is not None:  # each replica's sum: one reduction, then one update
            return context.merge_call(_replicas().apply_summed, args=(self, grads, variables))
        result = self.update_from_sum(grads, variables)
        if self.iter_size > 1:
            self._micro_step.assign_add(self.iter_size)
        return result

    def _prepare(self, grads, trainable_variables):
        """``(grads, variables)`` for Caffe's pipeline: built, frozen
        parameters' gradients 0, other None gradients dropped; None when
        there is nothing to apply (Keras raises its own error then)."""
        if trainable_variables is None:
            if not self.built:
                return None
            trainable_variables = self._built_variables
        trainable_variables = list(trainable_variables)
        if not self.built:
            with keras.name_scope(self.name, caller=self):
                self.build(trainable_variables)
        frozen = [self.frozen(v) for v in trainable_variables]
        pairs = [(ops.zeros(v.shape, v.dtype) if f else g, v)
                 for g, v, f in zip(grads, trainable_variables, frozen) if g is not None or f]
        if not pairs:
            return None
        return [ops.convert_to_tensor(g) for g, _ in pairs], [v for _, v in pairs]

    def frozen(self, variable):
        """Whether ``variable``'s ``lr_mult`` is 0 (once built).

        Caffe computes no gradient for such a parameter (``Net::Init`` sets
        its ``param_propagate_down`` to false), so its diff stays 0: it adds
        nothing to ``clip_gradients``' norm or to ``iter_size``'s sum, while
        ``Regularize`` still adds its weight decay and the solver still
        updates its history with that, at a local rate of 0, so the weight
        never moves. Its gradient here is taken as 0 whatever was computed
        (None included: an imported layer stops the gradient of such a blob,
        so none is computed).
        """
        if not self.built:
            return False
        index = self._get_variable_index(variable)
        return self._lr_mults[index] == 0.0

    def caffe_apply(self, grads, variables, reduce=None):
        """Caffe's pipeline on the gradients of built ``variables`` (no None):
        ``iter_size`` accumulation, then ``update_from_sum`` on every
        ``iter_size``-th call. ``reduce`` (data-parallel training's
        all-reduce, e.g. ``DistributedOptimizer.reduce_gradients``) runs once
        per update, on the summed gradients before clipping, as Caffe's
        multi-GPU solvers reduce each iteration's diffs before
        ``ApplyUpdate``; so ``iter_size`` passes send one update's bytes. A
        subclass may run it elsewhere (YellowFin compiles it with XLA).

        Inside ``strategy.run`` of a ``tf.distribute`` strategy with several
        replicas (``model.fit`` under ``MirroredStrategy``), one
        ``merge_call`` runs all of it in cross-replica context, the
        replicas' gradients summed once per update (``replicas``)."""
        context = _replica_context()
        if context is not None:
            if reduce is not None:
                raise DistributedError(
                    f"{type(self).__name__}: Horovod's all-reduce and a tf.distribute strategy "
                    f"with {_replicas().count()} replicas together: use one engine at a time")
            return context.merge_call(_replicas().caffe_apply, args=(self, grads, variables))
        if self.iter_size == 1:
            return self.update_from_sum(grads if reduce is None else reduce(grads), variables)
        sums = [self.slot(self._accumulators, v) for v in variables]
        for s, g in zip(sums, grads):
            s.assign_add(g)

        def update():
            totals = [s.value for s in sums]
            self.update_from_sum(totals if reduce is None else reduce(totals), variables)
            for s in sums:
                s.assign(ops.zeros(s.shape, s.dtype))

        is_update = ops.equal((self._micro_step + 1) % self.iter_size, 0)
        self.run_if(is_update, update, variables)
        self._micro_step.assign_add(1)

    def run_if(self, condition, update, variables):
        """Run ``update()``, which assigns ``variables`` and this optimizer's
        variables, only where the scalar ``condition`` holds.

        TensorFlow and PyTorch: a ``cond`` whose branch assigns. JAX: a traced
        branch cannot assign (Keras's JAX trainer runs the optimizer in a
        ``StatelessScope``), so ``update()`` runs every time and each variable
        it may change gets ``where(condition, new, old)``
        (``select_update``)."""
        if keras.backend.backend() == "jax":
            return self.select_update(condition, update, variables)
        ops.cond(condition, update, lambda: None)

    def select_update(self, condition, update, variables):
        """``update()`` run, then each of ``variables`` and this optimizer's
        variables set to its new value where ``condition`` holds, else back
        to its old one. The old values are read first: arrays that no assign
        changes in place (JAX's; a PyTorch variable's value is its storage,
        which is why ``run_if`` takes a ``cond`` there)."""
        seen, touched = set(), []
        for variable in list(variables) + list(self.variables):
            if id(variable) not in seen:
                seen.add(id(variable))
                touched.append(variable)
        before = [v.value for v in touched]
        update()
        for variable, old in zip(touched, before):
            variable.assign(ops.where(condition, variable.value, old))

    def update_from_sum(self, grads, variables):
        """``apply_update`` of ``caffe_gradients``: the update from the sum of
        an iteration's ``iter_size`` gradients of built ``variables``."""
        return self.apply_update(self.caffe_gradients(grads, variables), variables)

    def apply_update(self, grads, variables):
        """One update from Caffe-processed gradients: Keras's ``apply``, which
        calls ``update_step`` per variable and counts ``iterations``. A
        subclass that needs the whole gradient first (YellowFin) overrides it.
        In cross-replica context of several replicas, every device's copy is
        updated with these gradients (``replicas.update_each_replica``)."""
        if _in_cross_replica():
            if self.use_ema:
                raise KerasCaffeError(f"{type(self).__name__}: use_ema is not supported under "
                                      "a tf.distribute strategy")
            return _replicas().update_each_replica(self, grads, variables)
        return keras.optimizers.Optimizer.apply(self, grads, variables)

    def caffe_gradients(self, grads, variables):
        """Clip, normalize by ``iter_size`` and regularize, as Caffe does."""
        if self.clip_gradients is not None:
            sumsq = ops.sum(ops.stack([ops.sum(ops.square(g)) for g in grads]))
            norm = ops.sqrt(sumsq)
            scale = ops.where(norm > self.clip_gradients, self.clip_gradients / norm, 1.0)
            grads = [g * ops.cast(scale, g.dtype) for g in grads]
        if self.iter_size > 1:
            grads = [g * (1.0 / self.iter_size) for g in grads]
        if self.caffe_weight_decay:
            grads = [self._regularize(g, v) for g, v in zip(grads, variables)]
        return grads

    def _regularize(self, grad, variable):
        decay = self.caffe_weight_decay * self._decay_mults[self._get_variable_index(variable)]
        if decay == 0.0:
            return grad
        penalty = variable if self.regularization_type == "L2" else ops.sign(variable)
        return ops.add(ops.multiply(ops.cast(decay, grad.dtype), ops.cast(penalty, grad.dtype)), grad)

    # -- serialization --------------------------------------------------------

    def get_config(self) -> dict:
        """Keras's config plus the Caffe fields. A float rate, held in a
        float32 variable, is given as the shortest decimal of that float32
        (``0.01``, not ``0.009999999776482582``), and so are a solver file's
        fields (``float32_fields``): ``from_config`` rebuilds the same float32
        values."""
        config = super().get_config()
        for key in _REFUSED:
            config.pop(key, None)
        if isinstance(config.get("learning_rate"), float):
            config["learning_rate"] = shortest(config["learning_rate"])
        fields = {
            "weight_decay": self.caffe_weight_decay,
            "regularization_type": self.regularization_type,
            "clip_gradients": self.clip_gradients,
            "iter_size": self.iter_size,
        }
        fields.update({name: getattr(self, name) for name in self.solver_fields})
        config.update({k: shown(v, self._float32_fields) for k, v in fields.items()})
        config.update(lr_mult=dict(self.lr_mult), decay_mult=dict(self.decay_mult))
        if self._float32_fields:
            config["float32_fields"] = True
        return config

    # -- repr -------------------------------------------------------------------

    def rate_fields(self) -> dict:
        """The rate as a solver file gives it: ``base_lr`` and ``lr_policy``
        with the policy's fields for a Caffe schedule (``fixed`` for a
        number), else ``learning_rate`` holding the schedule."""
        source = self._rate_source
        if isinstance(source, keras.optimizers.schedules.LearningRateSchedule):
            fields = getattr(source, "caffe_fields", None)
            return fields() if fields is not None else {"learning_rate": source}
        if callable(source):
            return {"learning_rate": source}
        rate = float(ops.convert_to_numpy(self.learning_rate))
        return {"base_lr": shortest(rate), "lr_policy": "fixed"}

    def repr_fields(self) -> dict:
        """What ``repr`` shows: the rate, the solver's own fields,
        ``weight_decay``, and the other Caffe arguments where they are not
        their defaults."""
        fields = self.rate_fields()
        fields.update({name: getattr(self, name) for name in self.solver_fields})
        fields["weight_decay"] = self.caffe_weight_decay
        optional = {"regularization_type": (self.regularization_type, "L2"),
                    "clip_gradients": (self.clip_gradients, None),
                    "iter_size": (self.iter_size, 1),
                    "lr_mult": (dict(self.lr_mult), {}),
                    "decay_mult": (dict(self.decay_mult), {})}
        fields.update({k: v for k, (v, default) in optional.items() if v != default})
        return {k: shown(v, self._float32_fields) for k, v in fields.items()}

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.repr_fields().items())
        return f"{type(self).__name__}({args})"


# -- tf.distribute (TensorFlow's backend only) ----------------------------------


def _replicas():
    """``keras_caffe.optimizers.replicas``, which imports TensorFlow."""
    # here, not at the top: TensorFlow optional (tf.distribute exists on its backend only)
    from keras_caffe.optimizers import replicas

    return replicas


def _replica_context():
    """The replica context inside ``strategy.run`` of a ``tf.distribute``
    strategy (``replicas.replicated_replica_context``); None on another backend."""
    if keras.backend.backend() != "tensorflow":
        return None
    return _replicas().replicated_replica_context()


def _in_cross_replica():
    """Whether this runs in cross-replica context of a ``tf.distribute``
    strategy (never on another backend)."""
    return keras.backend.backend() == "tensorflow" and _replicas().replicated_cross_replica()
