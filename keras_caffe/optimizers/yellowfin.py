"""YellowFin, the momentum and learning-rate tuner, as a Caffe-style optimizer."""

from __future__ import annotations

import collections
import inspect
import math
from collections.abc import Mapping

import keras
from keras import ops

from keras_caffe._checks import check_int, check_number
from keras_caffe._floats import shortest
from keras_caffe._serializable import register
from keras_caffe.errors import ArgumentError
from keras_caffe.optimizers import yellowfin_feedback as feedback
from keras_caffe.optimizers import yellowfin_tuner as tuner
from keras_caffe.optimizers.base import CaffeOptimizer

_Schedule = keras.optimizers.schedules.LearningRateSchedule
_FLAGS = ("zero_debias", "sparsity_debias", "use_unsmoothed_lr_mu", "h_min_log_smooth",
          "h_max_log_smooth", "use_adaptive_clip", "use_nesterov")
_AVERAGES = ("h_min_avg", "h_max_avg", "grad_norm_sq_avg", "grad_norm_avg", "dist_avg",
             "grad_var_avg")

# jit_compile="auto" compiles the update when at least half of the parameters
# are in variables of this many elements or more (see ``compiles_update``).
JIT_MIN_ELEMENTS = 1 << 20

_Update = collections.namedtuple("_Update", "finite momentum rate step_factor stat_factor "
                                 "avg_weight")
_Update.__doc__ = """This update's scalars for ``update_step``, computed once: whether it
is taken (``finite``), the momentum and the rate of the step (before ``lr_mult``), the
factors of ``g`` in the step and in ``avg(g)`` (the clip scales, or 1), and ``k`` of
``avg(g)``. A skipped update gets momentum 1 and zero rate, factors and ``k``, which
write every per-parameter value back unchanged."""


class _Tuned(str):
    """A tuned value in ``repr``: ``0.987 (tuned)``, or before the optimizer
    is built ``<tuned from 0.0>`` (the first update's value)."""

    def __repr__(self):
        return str(self)


def _tensorflow():
    """``keras_caffe.optimizers.yellowfin_tensorflow``: the compiled update and the
    fused momentum kernel, TensorFlow's speed paths."""
    # here, not at the top: TensorFlow optional (its speed paths run on its backend only)
    from keras_caffe.optimizers import yellowfin_tensorflow

    return yellowfin_tensorflow


def _on_tensorflow():
    return keras.backend.backend() == "tensorflow"


def _multiply_no_nan(x, factor):
    """``x * factor``, and 0 where ``factor`` is 0 even if ``x`` is NaN or inf
    (``tf.math.multiply_no_nan``): a skipped step's zero factor zeroes it."""
    return ops.where(ops.equal(factor, 0), ops.zeros_like(x), ops.multiply(x, factor))


def _is_concrete(value):
    """Whether ``value`` can be read as a number here (not while a function is
    being traced or compiled)."""
    if _on_tensorflow():
        return _tensorflow().executing_eagerly()
    return not isinstance(value, _tracer_types())


def _tracer_types():
    """The types of a traced (not yet computed) value on JAX; none elsewhere."""
    if keras.backend.backend() != "jax":
        return ()
    import jax  # here, not at the top: on the JAX backend only (the backend is optional)

    return (jax.core.Tracer,)


@register
class YellowFin(CaffeOptimizer):
    """YellowFin (Zhang & Mitliagkas, MLSys 2019): momentum SGD whose rate and
    momentum are tuned at every update from gradient statistics.

    ``g`` is the gradient after Caffe's pipeline (``iter_size``,
    ``clip_gradients``, ``weight_decay`` with ``decay_mult``), then
    ``clip_thresh`` (global norm) and, with ``use_adaptive_clip``, clipped to
    ``sqrt(stat_protect_fac * h_max)`` (the previous update's ``h_max``). From
    it, with averages ``avg`` of rate ``beta`` (zero-debiased by default):

    - ``h_min``, ``h_max``: averages of the min and max of ``||g||^2`` over the
      last ``curv_win_width`` updates (of their logs with ``h_*_log_smooth``);
    - ``C = max(avg(||g||^2) - ||avg(g)||^2, 1e-6)``, the gradient variance;
    - ``D = avg(avg(||g||) / avg(||g||^2))``, the distance to the optimum.

    From the second update on, SingleStep gives ``sqrt(mu) = max(x,
    (sqrt(h_max/h_min) - 1) / (sqrt(h_max/h_min) + 1))`` where ``x`` minimises
    ``x^2 D^2 + (1 - x)^4 C / h_min^2`` (a cubic, solved in closed form), and
    ``alpha = (1 - sqrt(mu))^2 / h_min``, at most ``alpha (t + 1) / (10 w)``
    (slow start). The first update uses ``learning_rate`` and ``momentum``.
    With ``use_adaptive_clip``, ``g`` is clipped to ``sqrt(h_max)`` (previous
    update) before the step. With ``r = alpha * lr_factor * lr_mult``::

        v <- mu * v + g
        w <- w - r * v                  (use_nesterov: w <- w - r * (g + mu * v))

    A gradient with a NaN or inf (or with ``||g||^2`` or ``||g - avg(g)||^2``
    beyond float32) skips the update: no weight, slot or statistic changes
    (nor Keras's ``use_ema`` averages), ``iterations`` does not advance
    and ``skipped_steps`` does (under ``mixed_float16`` the
    ``LossScaleOptimizer`` skips such steps first).
    Guards, as the authors': curvature samples are ``||g||^2 + 1e-6``, C is
    floored at 1e-6 and ``D``'s denominator is ``avg(||g||^2) + 1e-6``.
    Under ``tf.distribute.MirroredStrategy`` the statistics see the sum of the
    replicas' gradients, once per update, on the first device, and every
    device applies the same step (``keras_caffe.optimizers.replicas``); the
    update is then not compiled by itself (one XLA program runs on one device).
    Every Keras backend runs the same formulas (``keras.ops``); on TensorFlow
    the momentum step is its fused kernel and the update may compile itself
    (``jit_compile``; ``keras_caffe.optimizers.yellowfin_tensorflow``).

    Cost: two passes over the parameters per update. The first reads ``g`` and
    ``avg(g)`` for ``||g||^2`` and ``||g - avg(g)||^2``, which mu and the rate
    of this very step need; the second writes ``avg(g)``, ``v`` and ``w``. In
    float32 that is 36 bytes of memory traffic per parameter against momentum
    SGD's 20, so where both updates are compiled a memory-bound one takes
    about 1.8x as long. In a step that is not compiled (Keras's default on
    CPU) the update compiles itself (``jit_compile``) while Keras's SGD runs
    op by op: about 1.05x on 27M parameters (``benchmarks/optimizer_step.py``).
    In a whole training step the update is a small part
    (``benchmarks/yellowfin_overhead.py``).

    Args:
        learning_rate, momentum: used for the first update only (a number;
            schedule the tuned rate with ``lr_factor``).
        lr_factor: a float or a ``LearningRateSchedule`` of ``iterations``
            multiplying the tuned rate (paper, Appendix J.4).
        clip_thresh: clip the gradient's global norm to this; None: off.
        beta: rate of every average, in (0, 1).
        curv_win_width: the curvature window, >= 1.
        zero_debias: divide the zero-started averages by ``1 - beta^t``.
        sparsity_debias: scale the statistics by the gradient's average
            density (for sparse gradients such as embeddings).
        use_unsmoothed_lr_mu: use SingleStep's values directly; False smooths
            them with ``beta`` (the paper's Algorithm 1).
        h_min_log_smooth, h_max_log_smooth: average log-curvatures.
        use_adaptive_clip, stat_protect_fac: the adaptive clipping of the
            paper's Appendix F.
        use_nesterov: Nesterov momentum.
        closed_loop, staleness, feedback_gain: closed-loop YellowFin (paper,
            Section 4), for asynchronous or stale-gradient training (a
            parameter server): the total momentum is measured assuming
            gradients ``staleness`` updates old (>= 0) and the algorithmic
            momentum is driven to SingleStep's ``mu`` with gain
            ``feedback_gain`` (in (0, 1], the paper's 0.01). Synchronous
            training (staleness 0, an all-reduce) needs none of it. Not with
            ``use_nesterov``. See ``keras_caffe.optimizers.yellowfin_feedback``.
        jit_compile: TensorFlow's backend: True: compile the whole update
            with XLA, also when the training step is not compiled (Keras's
            default on CPU); False: plain TensorFlow ops; "auto": True where
            big variables hold most of the parameters (``compiles_update``).
            A compiled training step compiles the update in any case. On JAX
            the update is compiled with the training step (Keras's default),
            on PyTorch it runs op by op; the argument is kept (and saved) but
            changes nothing there.
        weight_decay, regularization_type, clip_gradients, iter_size,
            lr_mult, decay_mult: Caffe's, as for ``CaffeOptimizer``.
        **kwargs: Keras's ``name``, ``use_ema``, ... (see ``CaffeOptimizer``).

    ``tuned_learning_rate``, ``tuned_momentum``, ``h_min``, ``h_max``,
    ``grad_var``, ``dist_to_opt`` and ``skipped_steps`` read the state (NaN for
    the statistics before the first update); with ``closed_loop``,
    ``tuned_momentum`` is the algorithmic momentum, ``target_momentum``
    SingleStep's and ``total_momentum`` the measured total (NaN until measured).
    Reference: the authors' TensorFlow ``YFOptimizer``, JianGoForIt/YellowFin
    tuner_utils/yellowfin.py; ``keras_caffe.optimizers.yellowfin_tuner``.
    """

    caffe_type = None  # no Caffe solver: a solver file cannot name it
    solver_fields = ("momentum", "clip_thresh", "beta", "curv_win_width",
                     "stat_protect_fac") + _FLAGS
    slot_names = ("velocity", "grad_avg")
    #: True while an XLA-compiled update is being traced (nested calls run plainly).
    _compiling = False

    def __init__(self, learning_rate: float = 1e-4, momentum: float = 0.0, *,
                 lr_factor: float | _Schedule = 1.0, clip_thresh: float | None = None,
                 beta: float = 0.999, curv_win_width: int = 20, zero_debias: bool = True,
                 sparsity_debias: bool = False, use_unsmoothed_lr_mu: bool = True,
                 h_min_log_smooth: bool = True, h_max_log_smooth: bool = True,
                 use_adaptive_clip: bool = True, stat_protect_fac: float = 100.0,
                 use_nesterov: bool = False, closed_loop: bool = False, staleness: int = 0,
                 feedback_gain: float = 0.01, jit_compile: bool | str = "auto",
                 weight_decay: float = 0.0, regularization_type: str = "L2",
                 clip_gradients: float | None = None, iter_size: int = 1,
                 lr_mult: Mapping[str, float] | None = None,
                 decay_mult: Mapping[str, float] | None = None,
                 **kwargs):
        owner = type(self).__name__
        if isinstance(learning_rate, _Schedule) or callable(learning_rate):
            raise ArgumentError(owner, "learning_rate", "must be a number (the rate before "
                                "tuning starts); schedule the tuned rate with `lr_factor`")
        super().__init__(learning_rate=learning_rate, weight_decay=weight_decay,
                         regularization_type=regularization_type,
                         clip_gradients=clip_gradients, iter_size=iter_size, lr_mult=lr_mult,
                         decay_mult=decay_mult, **kwargs)
        self.momentum = check_number(owner, "momentum", momentum, high=1.0, high_open=True)
        self._lr_factor = lr_factor if isinstance(lr_factor, _Schedule) else \
            check_number(owner, "lr_factor", lr_factor)
        if clip_thresh is not None:
            clip_thresh = check_number(owner, "clip_thresh", clip_thresh, low_open=True)
        self.clip_thresh = clip_thresh
        self.beta = check_number(owner, "beta", beta, high=1.0, low_open=True, high_open=True)
        self.curv_win_width = check_int(owner, "curv_win_width", curv_win_width, low=1)
        self.stat_protect_fac = check_number(owner, "stat_protect_fac", stat_protect_fac,
                                             low_open=True)
        flags = locals()
        for name in _FLAGS:
            if not isinstance(flags[name], bool):
                raise ArgumentError(owner, name, f"must be True or False, got {flags[name]!r}")
            setattr(self, name, flags[name])
        if not isinstance(closed_loop, bool):
            raise ArgumentError(owner, "closed_loop",
                                f"must be True or False, got {closed_loop!r}")
        if closed_loop and use_nesterov:
            raise ArgumentError(owner, "closed_loop", "cannot be used with use_nesterov=True "
                                "(the total momentum is measured for heavy-ball momentum)")
        self.closed_loop = closed_loop
        if not isinstance(jit_compile, bool) and jit_compile != "auto":
            raise ArgumentError(owner, "jit_compile",
                                f"must be True, False or 'auto', got {jit_compile!r}")
        self.jit_compile = jit_compile
        # The compiled updates, one per variable list (not tracked by Keras).
        object.__setattr__(self, "_compiled_updates", {})
        self.staleness = check_int(owner, "staleness", staleness, low=0)
        self.feedback_gain = check_number(owner, "feedback_gain", feedback_gain, high=1.0,
                                          low_open=True)

    def build(self, variables):
        if self.built:
            return
        super().build(variables)

        def scalar(name, dtype="float32", shape=()):
            return self.add_variable(shape=shape, dtype=dtype, name=name)

        self._yf_lr = scalar("yf_lr")
        self._yf_mu = scalar("yf_mu")
        self._lr_factor_value = self.add_variable(
            shape=(), dtype="float32", name="lr_factor",
            initializer=keras.initializers.Constant(
                1.0 if isinstance(self._lr_factor, _Schedule) else self._lr_factor))
        self._skipped_steps = scalar("skipped_steps", "int")  # as Keras's iterations
        self._curv_win = scalar("curv_win", shape=(self.curv_win_width,))
        for name in _AVERAGES + (("sparsity_avg",) if self.sparsity_debias else ()):
            setattr(self, "_" + name, scalar(name))
        if self.closed_loop:
            feedback.build(self, self.velocity)

    # -- the update ------------------------------------------------------------

    def compiles_update(self, variables):
        """Whether the update of ``variables`` is compiled by itself with XLA.

        ``jit_compile="auto"``: when at least half of the parameters are in
        variables of ``JIT_MIN_ELEMENTS`` (2^20) elements or more. There XLA's
        two fused loops per variable beat plain TensorFlow's kernel (and
        temporary) per operation; with many smaller variables, plain kernels
        win, as TensorFlow runs several variables' updates at once. Measured in
        uncompiled training steps on 2 CPU cores, YellowFin over
        ``keras.optimizers.SGD(momentum=0.9)``, compiled / plain: ResNet-20
        (0.27M parameters) 1.07 / 1.04, the same 4x wider (4.3M, none over
        2^20) 1.12 / 1.05, 8x wider (17M, mostly 2.4M-element kernels) 1.04 /
        1.06, a 27M-parameter 4096-2048-1000 MLP 1.11 / 1.95.
        """
        if self.jit_compile != "auto":
            return self.jit_compile
        sizes = [math.prod(v.shape) for v in variables]
        return 2 * sum(n for n in sizes if n >= JIT_MIN_ELEMENTS) >= sum(sizes)

    def caffe_apply(self, grads, variables, reduce=None):
        # A compiled update (Caffe's pipeline, the statistics, the tuning and
        # the per-parameter pass in one XLA program) also when the training
        # step is not compiled (Keras's default on CPU). Inside a compiled
        # step it is inlined. With ``reduce`` (an all-reduce, which has no
        # XLA kernel) the accumulation runs plainly and the update from the
        # reduced sum is the compiled part.
        if reduce is not None or not self._compiles_alone(variables):
            return super().caffe_apply(grads, variables, reduce)
        self._run_compiled(CaffeOptimizer.caffe_apply, grads, variables)

    def update_from_sum(self, grads, variables):
        if not self._compiles_alone(variables):
            return super().update_from_sum(grads, variables)
        self._run_compiled(CaffeOptimizer.update_from_sum, grads, variables)

    def _compiles_alone(self, variables):
        """Whether to run the update as its own XLA program here: not when
        already inside one, nor under a tf.distribute strategy (whose update
        runs in cross-replica context: ``replicas``)."""
        return (_on_tensorflow() and not self._compiling and not _tensorflow().has_strategy()
                and self.compiles_update(variables))

    def _run_compiled(self, method, grads, variables):
        """``method(self, grads, variables)`` as one XLA program, traced once
        per (method, variables) (TensorFlow's backend)."""
        _tensorflow().run_compiled(self, method, grads, variables)

    def apply_update(self, grads, variables):
        # Two passes over the gradient: one reduction (||g||^2, ||g - avg(g)||^2),
        # which the tuned mu and rate need, then one elementwise pass writing
        # avg(g), the velocity and the weights (update_step).
        # A gradient with a NaN or inf makes ||g||^2 NaN or inf (so does a norm
        # that overflows, which would poison the statistics as surely). Such a
        # step is skipped by writing every variable back unchanged (scalars
        # through where(finite, new, old), tensors by a neutral update_step),
        # not by a cond around the update: an XLA conditional that writes the
        # weights copies them on every step.
        # The sizes of the gradients are read from their shapes, which a traced
        # TensorFlow gradient can lack (a Dense layer on sequences of an
        # unknown batch size: (None, units)): it takes its variable's.
        grads = [g if None not in tuple(g.shape) else ops.reshape(g, v.shape)
                 for g, v in zip(grads, variables)]
        averages = [self.slot(self.grad_avg, v) for v in variables]
        sums = tuner.gradient_sums(grads, averages, self.sparsity_debias)
        update = self._tune(grads, variables, sums)
        skipped = ops.cast(ops.logical_not(update.finite), self.iterations.dtype)
        object.__setattr__(self, "_update", update)
        try:
            if self.use_ema:
                # Keras's moving average of the weights would move on a
                # skipped step: keep it out of that step (a cond; on JAX the
                # values kept only where the step is taken: ``run_if``).
                self.run_if(update.finite,
                            lambda: super(YellowFin, self).apply_update(grads, variables),
                            variables)
            else:
                super().apply_update(grads, variables)
                self.iterations.assign_sub(skipped)  # Optimizer.apply counted it
        finally:
            object.__setattr__(self, "_update", None)
        self._skipped_steps.assign_add(skipped)

    def _commit(self, variable, value, finite):
        """Assign ``value``, or keep the old value on a skipped step."""
        self.assign(variable, ops.where(finite, value, variable.value))

    def _step_rate(self):
        """The tuned rate times ``lr_factor``, as the momentum step uses it."""
        factor = (self._lr_factor(self.iterations) if isinstance(self._lr_factor, _Schedule)
                  else self._lr_factor_value)
        return self._yf_lr * ops.cast(factor, "float32")

    def update_step(self, gradient, variable, learning_rate):
        """One variable's share of the update pass: velocity, weights, avg(g).

        The momentum step ``v <- mu v + g``, ``w <- w - r v`` (Nesterov's
        ``w <- w - r g - r mu v``), in the order of TensorFlow's fused
        ``ResourceApplyMomentum``, which runs it on TensorFlow's backend (one
        kernel without XLA, and under XLA the same fused loop as the ops)."""
        update = self._update
        dtype = variable.dtype
        v, avg = self.slot(self.velocity, variable), self.slot(self.grad_avg, variable)
        # a zero factor (a skipped step) zeroes a NaN or inf too
        g = _multiply_no_nan(gradient, ops.cast(update.step_factor, gradient.dtype))
        rate = self.local_rate(update.rate, variable)
        if _on_tensorflow():
            _tensorflow().fused_momentum(variable, v, g, rate, update.momentum,
                                         self.use_nesterov)
        else:
            self._momentum_step(variable, v, ops.cast(g, dtype), rate,
                                ops.cast(update.momentum, dtype))
        g32 = g if update.stat_factor is update.step_factor else _multiply_no_nan(
            gradient, ops.cast(update.stat_factor, gradient.dtype))
        g32, avg32 = ops.cast(g32, "float32"), ops.cast(avg, "float32")
        self.assign(avg, avg32 + update.avg_weight * (g32 - avg32))

    def _momentum_step(self, variable, velocity, g, rate, mu):
        """``ResourceApplyMomentum``'s formula in ``keras.ops``:
        ``v <- v mu + g``; ``w <- w - v r``, Nesterov ``w <- w - (g r + v mu r)``."""
        v_new = ops.add(ops.multiply(velocity, mu), g)
        self.assign(velocity, v_new)
        if self.use_nesterov:
            step = ops.add(ops.multiply(g, rate), ops.multiply(ops.multiply(v_new, mu), rate))
        else:
            step = ops.multiply(v_new, rate)
        self.assign_sub(variable, step)

    def _tune(self, grads, variables, sums):
        """Measure, tune and store mu and the rate; return the ``_Update``."""
        learning_rate = self._initial_rate()
        t_int = ops.copy(self.iterations)  # a read, not the variable
        t = ops.cast(t_int, "float32")
        tuning = ops.greater(t_int, 0)
        h_max_prev = tuner.stored_estimates(self)[1]
        averages = [self.slot(self.grad_avg, v) for v in variables]
        measured = tuner.measure(self, grads, averages, sums, t_int, tuning, h_max_prev)
        finite = measured.finite
        for variable, value in measured.state:
            self._commit(variable, value, finite)
        h_min, h_max, grad_var, dist = measured.estimates
        mu, alpha = tuner.single_step(grad_var, dist, h_min, h_max)
        alpha = ops.minimum(alpha, alpha * (t + 1.0) / (10.0 * self.curv_win_width))
        prev_mu = ops.where(tuning, (self._cl_target if self.closed_loop else self._yf_mu).value,
                            self.momentum)
        prev_lr = ops.where(tuning, self._yf_lr.value, ops.cast(learning_rate, "float32"))
        mu, alpha = ops.where(tuning, mu, prev_mu), ops.where(tuning, alpha, prev_lr)
        if not self.use_unsmoothed_lr_mu:
            mu = self.beta * prev_mu + (1.0 - self.beta) * mu
            alpha = self.beta * prev_lr + (1.0 - self.beta) * alpha
        self._commit(self._yf_mu, mu, finite)
        self._commit(self._yf_lr, alpha, finite)

        scale, step_scale = measured.scale, measured.scale
        if self.use_adaptive_clip:
            step_scale = scale * ops.where(
                tuning, tuner.clip_scale(measured.norm, ops.sqrt(h_max_prev)), 1.0)
        if self.closed_loop:  # mu is the target: the feedback sets yf_mu
            feedback.close_loop(self, grads, variables, mu, step_scale, t_int, finite)

        def taken(value, otherwise):
            # The step's scalars (read after every assignment above); on a
            # skipped step the neutral ones, which leave everything as it was.
            return ops.where(finite, 1.0 if value is None else value, otherwise)

        step_factor = taken(step_scale, 0.0)
        stat_factor = step_factor if step_scale is scale else taken(scale, 0.0)
        return _Update(finite, taken(ops.convert_to_tensor(self._yf_mu), 1.0),
                       taken(self._step_rate(), 0.0), step_factor, stat_factor,
                       taken(measured.avg_weight, 0.0))

    # -- reading the tuner -------------------------------------------------------

    def _measured(self, index):
        if not self.built:
            return math.nan
        value = tuner.stored_estimates(self)[index]
        return ops.where(ops.greater(self.iterations, 0), value, math.nan)

    @property
    def tuned_learning_rate(self):
        """The rate of the last update (``learning_rate`` before the first)."""
        if not self.built:
            return float(self._initial_rate())
        return ops.where(ops.greater(self.iterations, 0), self._yf_lr.value,
                         ops.cast(self._initial_rate(), "float32"))

    @property
    def learning_rate(self):
        """The tuned rate, ``tuned_learning_rate`` (before ``lr_factor``), so
        that what Keras logs as the rate (TensorBoard's ``learning_rate``) is
        the rate YellowFin tuned. Setting it sets the first update's rate, as
        the ``learning_rate`` argument does."""
        return self.tuned_learning_rate

    @learning_rate.setter
    def learning_rate(self, value):
        keras.optimizers.Optimizer.learning_rate.fset(self, value)

    def _initial_rate(self):
        """The ``learning_rate`` argument's rate (Keras's ``learning_rate``)."""
        return keras.optimizers.Optimizer.learning_rate.fget(self)

    @property
    def tuned_momentum(self):
        """The momentum of the last update (``momentum`` before the first)."""
        if not self.built:
            return self.momentum
        return ops.where(ops.greater(self.iterations, 0), self._yf_mu.value, self.momentum)

    @property
    def target_momentum(self):
        """SingleStep's momentum of the last update (the closed loop's target;
        ``tuned_momentum`` in the open loop)."""
        if not self.closed_loop or not self.built:
            return self.tuned_momentum
        return ops.where(ops.greater(self.iterations, 0), self._cl_target.value, self.momentum)

    @property
    def total_momentum(self):
        """The closed loop's last measured total momentum (NaN before the
        first measurement, and in the open loop)."""
        if not self.closed_loop or not self.built:
            return math.nan
        return ops.copy(self._cl_total)

    h_min = property(lambda self: self._measured(0), doc="The curvature range's low end.")
    h_max = property(lambda self: self._measured(1), doc="The curvature range's high end.")
    grad_var = property(lambda self: self._measured(2), doc="C, the gradient variance.")
    dist_to_opt = property(lambda self: self._measured(3), doc="D, the distance to the optimum.")

    @property
    def skipped_steps(self):
        """How many updates were skipped for a NaN or inf gradient."""
        return ops.copy(self._skipped_steps) if self.built else 0

    @property
    def lr_factor(self):
        """The tuned rate's multiplier: its schedule, or its current value."""
        if isinstance(self._lr_factor, _Schedule) or not self.built:
            return self._lr_factor
        return float(self._lr_factor_value.numpy())

    @lr_factor.setter
    def lr_factor(self, value):
        if isinstance(self._lr_factor, _Schedule) or isinstance(value, _Schedule):
            raise ArgumentError(type(self).__name__, "lr_factor",
                                "can only be set to a number, on an optimizer made with one")
        self._lr_factor = check_number(type(self).__name__, "lr_factor", value)
        if self.built:
            self._lr_factor_value.assign(self._lr_factor)

    # -- serialization ---------------------------------------------------------------

    def get_config(self) -> dict:
        config = super().get_config()
        factor = self.lr_factor
        if isinstance(factor, float) and self.built:  # read from its float32 variable
            factor = shortest(factor)
        config["lr_factor"] = keras.optimizers.schedules.serialize(factor) \
            if isinstance(factor, _Schedule) else factor
        config.update(closed_loop=self.closed_loop, staleness=self.staleness,
                      feedback_gain=self.feedback_gain, jit_compile=self.jit_compile)
        return config

    def rate_fields(self) -> dict:
        """The tuned rate (``_Tuned``), and ``lr_factor``."""
        factor = self.lr_factor
        return {"learning_rate": self._tuned_field(self.tuned_learning_rate,
                                                   self._initial_rate()),
                "lr_factor": shortest(factor) if isinstance(factor, float) else factor}

    def _tuned_field(self, value, initial):
        """A tuned value as ``repr`` shows it: its current value once built,
        else ``<tuned from`` the first update's ``>``."""
        if self.built and _is_concrete(value):
            return _Tuned(f"{shortest(float(ops.convert_to_numpy(value)))!r} (tuned)")
        return _Tuned(f"<tuned from {shortest(float(ops.convert_to_numpy(initial)))!r}>")

    def repr_fields(self) -> dict:
        """The rate and ``momentum``, tuned (``_Tuned``), then every argument
        that is not its default."""
        fields = super().repr_fields()
        fields["momentum"] = self._tuned_field(self.tuned_momentum, self.momentum)
        defaults = {name: p.default for name, p in
                    inspect.signature(YellowFin.__init__).parameters.items()}
        fields.update(closed_loop=self.closed_loop, staleness=self.staleness,
                      feedback_gain=self.feedback_gain, jit_compile=self.jit_compile)
        keep = ("learning_rate", "momentum", "weight_decay")
        return {k: v for k, v in fields.items()
                if k in keep or k not in defaults or v != defaults[k]}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        if isinstance(config.get("lr_factor"), dict):
            config["lr_factor"] = keras.optimizers.schedules.deserialize(
                config["lr_factor"], custom_objects=custom_objects)
        return super().from_config(config, custom_objects=custom_objects)
