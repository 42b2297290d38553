"""Caffe's learning-rate policies as Keras ``LearningRateSchedule`` classes.

Each schedule is called with Caffe's iteration number ``iter``: the number of
parameter updates done so far (0 at the first update). keras-caffe's
optimizers call it with ``optimizer.iterations``, which counts updates, not
``iter_size`` micro-batches, so the rate matches Caffe's at every iteration.

Formulas (``caffe/src/caffe/solvers/sgd_solver.cpp``, ``GetLearningRate``):

==========  ===============================================================
fixed       base_lr
step        base_lr * gamma ^ floor(iter / stepsize)
exp         base_lr * gamma ^ iter
inv         base_lr * (1 + gamma * iter) ^ (-power)
multistep   base_lr * gamma ^ (number of stepvalues <= iter)
poly        base_lr * (1 - iter / max_iter) ^ power
sigmoid     base_lr / (1 + exp(-gamma * (iter - stepsize)))
==========  ===============================================================

``Warmup`` wraps any schedule with a linear warm-up, the large-batch recipe
of Goyal et al., "Accurate, Large Minibatch SGD" (2017).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import keras
import numpy as np
from keras import ops

from keras_caffe._checks import check_int, check_number
from keras_caffe._floats import float32_value, shown, widest_float
from keras_caffe.errors import ArgumentError, SolverError
from keras_caffe.importers.formats.solver_file import read_solver
from keras_caffe._serializable import register



class CaffeSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Base of the Caffe policies: holds ``base_lr`` and names the policy.

    Subclasses set ``policy`` (the solver file's ``lr_policy`` string) and
    ``solver_fields`` (the SolverParameter fields they take besides
    ``base_lr``), and implement ``rate(iteration)`` on an ``iteration``
    tensor of ``compute_dtype``: the precision Caffe computes the policy in
    (``step``, ``exp`` and ``multistep`` call ``pow`` in double; ``inv``,
    ``poly`` and ``sigmoid`` stay in float), where the backend has it (JAX
    without x64 has no float64: ``keras_caffe._floats.widest_float``). The
    rate is returned as float32, equal to Caffe's to the last printed digit.

    ``float32_fields=True`` says the float arguments are a solver file's
    ``float`` fields (``from_solver`` sets it): they are rounded to float32,
    as Caffe holds them, and ``get_config`` and ``repr`` show the shortest
    decimal of that float32 (``0.1``, not ``0.10000000149011612``).
    Otherwise they are used as given.
    """

    policy: str | None = None
    solver_fields: tuple[str, ...] = ()
    #: Caffe's precision for the policy: "float64" (``widest_float()``) or "float32".
    compute_dtype = "float64"

    def __init__(self, base_lr: float, *, float32_fields: bool = False):
        if not isinstance(float32_fields, bool):
            raise ArgumentError(type(self).__name__, "float32_fields",
                                f"must be True or False, got {float32_fields!r}")
        self.float32_fields = float32_fields
        self.base_lr = self._float("base_lr", base_lr)

    def _float(self, name, value, **limits):
        """A float argument, checked, rounded to float32 for a solver file's."""
        value = check_number(type(self).__name__, name, value, **limits)
        return float32_value(value) if self.float32_fields else value

    def __call__(self, step):
        dtype = widest_float() if self.compute_dtype == "float64" else self.compute_dtype
        return ops.cast(self.rate(ops.cast(step, dtype)), "float32")

    def rate(self, iteration):
        raise NotImplementedError

    def get_config(self) -> dict:
        config = {"base_lr": self.base_lr}
        config.update({name: getattr(self, name) for name in self.solver_fields})
        config = {k: shown(v, self.float32_fields) for k, v in config.items()}
        if self.float32_fields:
            config["float32_fields"] = True
        return config

    def caffe_fields(self) -> dict:
        """The solver file's fields: ``base_lr``, ``lr_policy`` and the
        policy's own, as shown in ``repr`` (shortest float32 decimals for a
        solver file's)."""
        config = self.get_config()
        config.pop("float32_fields", None)
        return {"base_lr": config.pop("base_lr"), "lr_policy": self.policy, **config}

    def __repr__(self):
        config = self.get_config()
        config.pop("float32_fields", None)
        args = ", ".join(f"{k}={v!r}" for k, v in config.items())
        return f"{type(self).__name__}({args})"


def caffe_pow(base, exponent):
    """``base ** exponent`` for a Python float ``base`` and a tensor of whole
    numbers ``exponent`` (an iteration, a step count), as Caffe's double
    ``pow``.

    In float64 where the backend has it. On JAX without x64 (float32 only),
    ``exp(exponent * log(base))`` with ``log(base)`` taken in double and both
    factors split into 12-bit halves, so that every partial product is exact
    in float32 and only the ``exp`` calls round: within a few float32 ulps of
    the double result for exponents below 2^24. (Rounding ``base`` to float32
    first would be off by ``exponent`` times its rounding: 2.6e-5 relative
    for 0.999 at iteration 2000.)
    """
    dtype = keras.backend.standardize_dtype(exponent.dtype)
    if dtype != "float32":
        # the base as a tensor of that dtype: a Python float would be float32 on PyTorch
        return ops.power(ops.convert_to_tensor(base, dtype), exponent)
    log_base = math.log(base)
    high = _top_bits(log_base)
    low = _top_bits(log_base - high)
    rest = float(np.float32(log_base - high - low))
    t_high = ops.floor(exponent / 4096.0) * 4096.0  # whole numbers: exact
    t_low = exponent - t_high
    result = ops.exp(t_high * high) * ops.exp(t_high * low)
    result = result * ops.exp(t_low * high) * ops.exp(t_low * low)
    return result * ops.exp(exponent * rest)


def _top_bits(value, bits=12):
    """``value`` rounded to ``bits`` significant bits (a float32 whose products
    with a 12-bit whole number are exact)."""
    if value == 0.0:
        return 0.0
    exponent = math.floor(math.log2(abs(value))) - bits + 1
    return float(round(value / 2.0 ** exponent) * 2.0 ** exponent)


@register
class Fixed(CaffeSchedule):
    """``lr = base_lr``."""

    policy = "fixed"

    def rate(self, iteration):
        return ops.full_like(iteration, self.base_lr)


@register
class Step(CaffeSchedule):
    """``lr = base_lr * gamma ^ floor(iter / stepsize)``."""

    policy = "step"
    solver_fields = ("gamma", "stepsize")

    def __init__(self, base_lr: float, gamma: float, stepsize: int, *,
                 float32_fields: bool = False):
        super().__init__(base_lr, float32_fields=float32_fields)
        self.gamma = self._float("gamma", gamma)
        self.stepsize = check_int("Step", "stepsize", stepsize, low=1)

    def rate(self, iteration):
        return self.base_lr * caffe_pow(self.gamma, ops.floor(iteration / self.stepsize))


@register
class Exp(CaffeSchedule):
    """``lr = base_lr * gamma ^ iter``."""

    policy = "exp"
    solver_fields = ("gamma",)

    def __init__(self, base_lr: float, gamma: float, *, float32_fields: bool = False):
        super().__init__(base_lr, float32_fields=float32_fields)
        self.gamma = self._float("gamma", gamma)

    def rate(self, iteration):
        return self.base_lr * caffe_pow(self.gamma, iteration)


@register
class Inv(CaffeSchedule):
    """``lr = base_lr * (1 + gamma * iter) ^ (-power)``."""

    policy = "inv"
    solver_fields = ("gamma", "power")
    compute_dtype = "float32"

    def __init__(self, base_lr: float, gamma: float, power: float, *,
                 float32_fields: bool = False):
        super().__init__(base_lr, float32_fields=float32_fields)
        self.gamma = self._float("gamma", gamma)
        self.power = self._float("power", power)

    def rate(self, iteration):
        return self.base_lr * ops.power(1.0 + self.gamma * iteration, -self.power)


@register
class MultiStep(CaffeSchedule):
    """``lr = base_lr * gamma ^ k``, k = how many of ``stepvalue`` are <= iter.

    ``stepvalue`` must be strictly increasing. (Caffe advances one step per
    iteration at most, which equals this count only for increasing values;
    other orders are refused rather than silently reinterpreted.)
    """

    policy = "multistep"
    solver_fields = ("gamma", "stepvalue")

    def __init__(self, base_lr: float, gamma: float, stepvalue: int | Sequence[int], *,
                 float32_fields: bool = False):
        super().__init__(base_lr, float32_fields=float32_fields)
        self.gamma = self._float("gamma", gamma)
        if isinstance(stepvalue, (int, float)):
            stepvalue = [stepvalue]
        values = [check_int("MultiStep", "stepvalue", v, low=0) for v in stepvalue]
        if not values:
            raise ArgumentError("MultiStep", "stepvalue", "must hold at least one iteration")
        if any(b <= a for a, b in zip(values, values[1:])):
            raise ArgumentError(
                "MultiStep", "stepvalue", f"must be strictly increasing, got {values}"
            )
        self.stepvalue = values

    def rate(self, iteration):
        passed = ops.sum(
            ops.cast(ops.convert_to_tensor(self.stepvalue, iteration.dtype) <= iteration,
                     iteration.dtype)
        )
        return self.base_lr * caffe_pow(self.gamma, passed)


@register
class Poly(CaffeSchedule):
    """``lr = base_lr * (1 - iter / max_iter) ^ power``, 0 from ``max_iter`` on.

    Caffe stops at ``max_iter``; past it (a Keras ``fit`` that runs longer)
    the rate stays 0 instead of going negative or NaN.
    """

    policy = "poly"
    solver_fields = ("power", "max_iter")
    compute_dtype = "float32"

    def __init__(self, base_lr: float, power: float, max_iter: int, *,
                 float32_fields: bool = False):
        super().__init__(base_lr, float32_fields=float32_fields)
        self.power = self._float("power", power)
        self.max_iter = check_int("Poly", "max_iter", max_iter, low=1)

    def rate(self, iteration):
        done = ops.minimum(iteration, float(self.max_iter)) / self.max_iter
        return self.base_lr * ops.power(1.0 - done, self.power)


@register
class Sigmoid(CaffeSchedule):
    """``lr = base_lr / (1 + exp(-gamma * (iter - stepsize)))``.

    Caffe refuses a negative ``gamma`` here (the rate can only ramp up), and
    so does this class.
    """

    policy = "sigmoid"
    solver_fields = ("gamma", "stepsize")
    compute_dtype = "float32"

    def __init__(self, base_lr: float, gamma: float, stepsize: int, *,
                 float32_fields: bool = False):
        super().__init__(base_lr, float32_fields=float32_fields)
        self.gamma = self._float("gamma", gamma)
        self.stepsize = check_int("Sigmoid", "stepsize", stepsize, low=0)

    def rate(self, iteration):
        return self.base_lr / (1.0 + ops.exp(-self.gamma * (iteration - self.stepsize)))


@register
class Warmup(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up in front of any schedule (the large-batch recipe).

    ``lr(iter) = schedule(iter) * f(iter)`` with
    ``f = start_factor + (1 - start_factor) * min(iter, warmup_iter) / warmup_iter``,
    so the rate rises linearly from ``start_factor`` times the schedule's to
    the full schedule at ``warmup_iter`` and follows it from then on.
    Goyal et al. 2017 warm up over 5 epochs from ``start_factor = 1/k`` when
    the batch (and the rate) is scaled up k times.
    """

    def __init__(self, schedule: keras.optimizers.schedules.LearningRateSchedule | float,
                 warmup_iter: int, start_factor: float = 0.1):
        if not isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
            if isinstance(schedule, (int, float)):
                schedule = Fixed(schedule)
            else:
                raise ArgumentError(
                    "Warmup", "schedule",
                    f"must be a LearningRateSchedule or a number, got {type(schedule).__name__}",
                )
        self.schedule = schedule
        self.warmup_iter = check_int("Warmup", "warmup_iter", warmup_iter, low=1)
        self.start_factor = check_number("Warmup", "start_factor", start_factor, high=1.0)

    def __call__(self, step):
        iteration = ops.cast(step, widest_float())
        progress = ops.minimum(iteration, float(self.warmup_iter)) / self.warmup_iter
        factor = self.start_factor + (1.0 - self.start_factor) * progress
        return ops.cast(self.schedule(step), "float32") * ops.cast(factor, "float32")

    def get_config(self) -> dict:
        return {
            "schedule": keras.saving.serialize_keras_object(self.schedule),
            "warmup_iter": self.warmup_iter,
            "start_factor": self.start_factor,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["schedule"] = keras.saving.deserialize_keras_object(config["schedule"])
        return cls(**config)

    def __repr__(self):
        return (f"Warmup({self.schedule!r}, warmup_iter={self.warmup_iter}, "
                f"start_factor={self.start_factor!r})")


POLICIES = {cls.policy: cls for cls in (Fixed, Step, Exp, Inv, MultiStep, Poly, Sigmoid)}


__all__ = ["CaffeSchedule", "Fixed", "Step", "Exp", "Inv", "MultiStep", "Poly", "Sigmoid",
           "Warmup", "POLICIES", "from_solver", "schedule_from_param"]


def from_solver(solver) -> CaffeSchedule:
    """The schedule a Caffe solver file describes.

    ``solver`` is a path, prototxt text or a parsed ``SolverParameter``.
    Raises ``SolverError`` naming the file when ``lr_policy`` is unknown or
    a field the policy needs is not set, and ``ArgumentError`` when a field
    has a bad value.
    """
    param, source = read_solver(solver)
    return schedule_from_param(param, source)


def schedule_from_param(param, source) -> CaffeSchedule:
    """``from_solver`` for a parsed ``SolverParameter`` and its source name."""
    valid = ", ".join(POLICIES)
    if not param.HasField("lr_policy"):
        raise SolverError(source, f"`lr_policy` is not set; valid policies: {valid}")
    cls = POLICIES.get(param.lr_policy)
    if cls is None:
        raise SolverError(
            source, f"unknown lr_policy {param.lr_policy!r}; valid policies: {valid}"
        )
    if not param.HasField("base_lr"):
        raise SolverError(source, "`base_lr` is not set")
    missing = [f for f in cls.solver_fields if not _is_set(param, f)]
    if missing:
        raise SolverError(
            source,
            f"lr_policy {cls.policy!r} needs " + ", ".join(f"`{f}`" for f in missing)
            + ("; it is" if len(missing) == 1 else "; they are") + " not set",
        )
    kwargs = {f: _value(param, f) for f in cls.solver_fields}
    try:
        return cls(base_lr=param.base_lr, float32_fields=True, **kwargs)
    except ArgumentError as err:
        raise SolverError(source, str(err)) from None


def _is_set(param, field):
    if field == "stepvalue":
        return len(param.stepvalue) > 0
    return param.HasField(field)


def _value(param, field):
    if field == "stepvalue":
        return list(param.stepvalue)
    return getattr(param, field)
