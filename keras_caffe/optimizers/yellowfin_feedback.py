"""Closed-loop YellowFin: measure the total momentum of the running system and
drive the algorithmic momentum towards the tuner's target by negative feedback.

Zhang & Mitliagkas, "YellowFin and the Art of Momentum Tuning", MLSys 2019
(arXiv:1706.03471), Section 4 and Appendix G; Mitliagkas, Zhang, Hadjis & Ré,
"Asynchrony begets momentum, with an application to deep learning",
Allerton 2016 (arXiv:1605.09774).

Where it applies. In asynchronous (or otherwise stale-gradient) training,
such as workers pushing gradients to a parameter server without waiting for
each other, a gradient is applied some updates after the weights it was
computed on were read. Staleness acts as extra, implicit momentum
(Mitliagkas et al.: about ``1 - 1/M`` with ``M`` asynchronous workers), so
the system runs with more momentum than YellowFin's target ``mu*``. The
closed loop measures the total momentum and lowers the algorithmic momentum
until the total is back at ``mu*``. Synchronous training (one device, or
data parallelism with an all-reduce) has no staleness: the measurement is
the algorithmic momentum itself and the closed loop is the open loop.

Measurement (paper, Section 4). The running system is modelled as momentum
SGD on fresh gradients with the total momentum ``mu_T``::

    x_(s+1) - x_s = mu_T (x_s - x_(s-1)) - r lr_mult grad f(x_s)

With ``v_j`` the velocity before update ``j`` (``v_(j+1) = mu_j v_j + g_j``,
``x_(j+1) = x_j - r_j lr_mult v_(j+1)``) and the rate ``r`` steady, this is
``v_(s+1) = mu_T v_s + grad f(x_s)``. With staleness ``tau``, the gradient
applied at update ``t - 1``, ``g_(t-1)`` (after YellowFin's clipping), was
computed at ``x_s``, ``s = t - 1 - tau``; so at update ``t`` each coordinate
``i`` gives::

    mu_T ~ (v_(t-tau) - g_(t-1))_i / (v_(t-tau-1))_i

and the paper's estimate is the median of these ratios over the coordinates
(the paper writes it with the weights, ``x_(t-tau) - x_(t-tau-1) + r
g_(t-1)`` over ``x_(t-tau-1) - x_(t-tau-2)``: the same ratio times ``r`` over
``r``; in velocities a change of the rate, YellowFin's slow start or an
``lr_factor`` schedule, does not read as momentum, and ``lr_mult`` cancels).
A single update's ratios are too noisy to steer by (a previous attempt of
this project saw estimates swing between -38 and 16 on a noisy quadratic),
so the numerator and the denominator are first averaged over updates, per
coordinate, with an exponential moving average of weight ``MEASURE_DECAY``
(as in the authors' momentum-sensor prototype), and::

    mu_T = median_i( avg(v_(t-tau) - g_(t-1))_i / avg(v_(t-tau-1))_i )

over the coordinates whose ratio is finite. Without staleness (``tau = 0``,
fresh gradients) every ratio is ``mu_(t-1)`` exactly, and ``mu_T`` is the
algorithmic momentum averaged over the last ~10 updates.

Feedback (paper, Algorithm 5: ``mu <- mu + gamma (mu* - mu_T)``, ``gamma =
0.01``). The paper's recursion integrates the error into ``mu`` itself, so
``mu`` lags a changing ``mu*`` by about ``1/gamma`` updates even where there
is nothing to correct. Here the integral acts on an offset and the target is
fed forward::

    e <- min(max(e + gamma (mu* - mu_T), MOMENTUM_FLOOR - mu*), 0)
    mu = mu* + e

Same fixed point (``mu_T = mu*``). ``e <= 0``: the loop only removes
momentum and never runs above the open loop's ``mu*``; ``mu`` is never below
``MOMENTUM_FLOOR`` (which also stops the integral winding up). Before ``tau
+ 2`` updates there is nothing to measure and ``mu = mu*``.

Memory. The ratios are taken on a fixed pseudo-random sample of at most
``SAMPLE_SIZE`` coordinates (every coordinate of a smaller model) of the
variables whose ``lr_mult`` is not 0: the median over a uniform sample
estimates the median over all coordinates. The state is a ring of the last
``tau + 2`` sampled velocities, the sampled last gradient and the two
sampled averages: ``(tau + 5) * SAMPLE_SIZE`` floats at most, whatever the
model's size; no weights are stored.

The functions hold no state: ``YellowFin`` calls ``build`` once and
``close_loop`` once per update. Float32 throughout, on the device.
"""

import math

import keras
import numpy as np
from keras import ops

from keras_caffe.errors import ArgumentError

#: At most this many coordinates are sampled for the median.
SAMPLE_SIZE = 4096
#: Weight of the old value in the per-coordinate averages of the numerator
#: and the denominator (an average over about 10 updates).
MEASURE_DECAY = 0.9
#: The feedback never lowers the momentum below this.
MOMENTUM_FLOOR = -0.5
#: Seed of the coordinate sample: the sample is a function of the variables'
#: sizes, so a restored optimizer samples the same coordinates.
SAMPLE_SEED = 1706

_F32 = "float32"


def sample_plan(sizes, size=SAMPLE_SIZE, seed=SAMPLE_SEED):
    """The sampled coordinates: one sorted int64 array of flat indices per
    variable (every index when ``sum(sizes) <= size``; a size of 0 takes none)."""
    total = int(sum(sizes))
    if total <= size:
        picks = np.arange(total, dtype=np.int64)
    else:
        picks = np.sort(np.random.default_rng(seed).choice(total, size, replace=False))
    bounds = np.cumsum([0] + [int(n) for n in sizes])
    return [picks[(picks >= lo) & (picks < hi)] - lo for lo, hi in zip(bounds, bounds[1:])]


def gather(values, plan):
    """The sampled coordinates of ``values`` (one tensor, or None for zeros,
    per plan entry) as one float32 vector."""
    parts = []
    for value, indices in zip(values, plan):
        if not len(indices):
            continue
        if value is None:
            parts.append(ops.zeros((len(indices),), _F32))
        else:
            flat = ops.reshape(ops.cast(value, _F32), (-1,))
            parts.append(ops.take(flat, ops.convert_to_tensor(indices)))
    return ops.concatenate(parts, axis=0)


def masked_median(x):
    """The median of the finite entries of the vector ``x`` (NaN if none)."""
    finite = ops.isfinite(x)
    count = ops.sum(ops.cast(finite, "int32"))
    ordered = ops.sort(ops.where(finite, x, math.inf))
    low = ops.take(ordered, ops.maximum((count - 1) // 2, 0))
    high = ops.take(ordered, ops.maximum(count // 2, 0))
    return ops.where(count > 0, 0.5 * (low + high), math.nan)


def feedback(offset, target, measured, gain, floor=MOMENTUM_FLOOR):
    """The integral controller's new offset ``e`` (the momentum is ``target + e``)."""
    new = offset + gain * (target - measured)
    return ops.minimum(ops.maximum(new, floor - target), 0.0)


def build(opt, slots):
    """Add the closed loop's state to ``opt`` for its velocity ``slots``
    (``opt._lr_mults`` lists their ``lr_mult``)."""
    sizes = [math.prod(s.shape) if m != 0.0 else 0 for s, m in zip(slots, opt._lr_mults)]
    plan = sample_plan(sizes)
    size = int(sum(len(p) for p in plan))
    if size == 0:
        raise ArgumentError(type(opt).__name__, "closed_loop",
                            "needs a variable whose lr_mult is not 0 (all are frozen)")
    # A plain attribute, not tracked state: it follows from the shapes.
    object.__setattr__(opt, "_cl_plan", tuple(plan))

    def var(name, shape=(), value=0.0):
        return opt.add_variable(shape=shape, dtype=_F32, name=name,
                                initializer=keras.initializers.Constant(value))

    opt._cl_velocities = var("cl_velocities", (opt.staleness + 2, size))
    opt._cl_grad = var("cl_grad", (size,))
    opt._cl_numerator = var("cl_numerator", (size,))
    opt._cl_denominator = var("cl_denominator", (size,))
    opt._cl_offset = var("cl_offset")
    opt._cl_total = var("cl_total", value=math.nan)
    opt._cl_target = var("cl_target")


def close_loop(opt, grads, variables, target, scale, step, finite):
    """Measure the total momentum, update the feedback and store ``opt``'s
    momentum for this update (``target`` is SingleStep's ``mu*``).

    ``grads``/``variables``: this update's gradients (before ``scale``, the
    step's clipping factor or None) and their variables; ``step``: the number
    of earlier updates; ``finite``: False when the update is skipped, which
    leaves every variable as it was. Keeps this update's sampled gradient
    for the next measurement.
    """
    tau, ring = opt.staleness, opt.staleness + 2
    t = ops.cast(step, "int32")

    # v_t, the velocity before this update, into slot t mod ring.
    velocity = gather([ops.convert_to_tensor(v) for v in opt.velocity], opt._cl_plan)
    here = ops.equal(ops.arange(ring, dtype="int32"), t % ring)
    velocities = ops.where(here[:, None], velocity[None, :], opt._cl_velocities.value)
    opt._commit(opt._cl_velocities, velocities, finite)

    # (v_(t-tau) - g_(t-1)) / v_(t-tau-1), numerator and denominator averaged.
    numerator = ops.take(velocities, (t - tau) % ring, axis=0) - opt._cl_grad
    denominator = ops.take(velocities, (t - tau - 1) % ring, axis=0)
    ready = ops.greater_equal(t, tau + 2)
    decay = MEASURE_DECAY
    num_avg = ops.where(ready, decay * opt._cl_numerator + (1.0 - decay) * numerator,
                        opt._cl_numerator.value)
    den_avg = ops.where(ready, decay * opt._cl_denominator + (1.0 - decay) * denominator,
                        opt._cl_denominator.value)
    opt._commit(opt._cl_numerator, num_avg, finite)
    opt._commit(opt._cl_denominator, den_avg, finite)
    measured = masked_median(num_avg / den_avg)
    valid = ops.logical_and(ready, ops.isfinite(measured))

    offset = ops.where(valid, feedback(opt._cl_offset, target, measured, opt.feedback_gain),
                       opt._cl_offset.value)
    opt._commit(opt._cl_offset, offset, finite)
    opt._commit(opt._cl_total, ops.where(valid, measured, opt._cl_total.value), finite)
    opt._commit(opt._cl_target, target, finite)
    opt._commit(opt._yf_mu, target + offset, finite)

    # g_t as the step applies it, for the measurement of update t + 1.
    by_index = {opt._get_variable_index(v): g for g, v in zip(grads, variables)}
    grad = gather([by_index.get(i) for i in range(len(opt._cl_plan))], opt._cl_plan)
    if scale is not None:
        grad = grad * ops.cast(scale, _F32)
    opt._commit(opt._cl_grad, grad, finite)
