"""YellowFin's measurements and its SingleStep tuner, as functions of tensors.

Zhang & Mitliagkas, "YellowFin and the Art of Momentum Tuning", MLSys 2019
(arXiv:1706.03471). ``keras_caffe.optimizers.yellowfin.YellowFin`` keeps the
state and calls these once per update; they hold no state themselves. All
arithmetic is float32 and stays on the device.

Every average is ``avg <- avg + k_t * (x - avg)``. With ``zero_debias``,
``k_t = (1 - beta) / (1 - beta^(t+1))`` (``t`` counts earlier updates), so the
stored value already is the zero-started EMA divided by ``1 - beta^(t+1)``,
what ``tf.train.ExponentialMovingAverage(zero_debias=True)`` returns in the
authors' implementation. Without it, ``k_t = 1 - beta`` from zero.

An update reads the gradient twice: ``gradient_sums`` reduces it (with the
gradient average) to the scalars the tuner needs, then the optimizer's
``update_step`` writes the average, the velocity and the weights. Only a step
whose statistics clip the gradient reads it once more (``scaled_deviation``).
"""

import collections
import math

from keras import ops

from keras_caffe import devices

#: The authors' absolute guard (``EPS`` in JianGoForIt/YellowFin,
#: tuner_utils/yellowfin.py): added to each curvature sample, floor of the
#: variance, added to the distance's denominator, floor of the sparsity.
EPS = 1e-6

_F32 = "float32"


def ema_weights(beta, step, zero_debias):
    """``(k_t, 1 - k_t)`` of the averages at update ``step`` (0-based, a float
    tensor), each to float32 accuracy.

    ``1 - beta^(t+1)`` is ``-expm1((t+1) log(beta))``, exact to float32 where
    the naive form loses 4 digits at t = 0. ``k_t <= 1`` (exactly 1 at t = 0)
    is kept so: the quotient rounds to ``1 + 1 ulp`` at t = 0 with Eigen's
    ``expm1`` and to ``1 + 2 ulp`` with XLA's (TensorFlow's compiled update,
    JAX). ``1 - k_t`` is computed as ``beta (1 - beta^t) / (1 - beta^(t+1))``,
    not by subtraction, so that ``k_0 (1 - k_0) ||g||^2`` starts the variance
    at 0 exactly (not at ``-1e-7 ||g||^2``).
    """
    if not zero_debias:
        return ops.convert_to_tensor(1.0 - beta, _F32), ops.convert_to_tensor(beta, _F32)
    log_beta = math.log(beta)
    debias = -ops.expm1((step + 1.0) * log_beta)
    return (ops.minimum((1.0 - beta) / debias, 1.0),
            beta * -ops.expm1(step * log_beta) / debias)


def clip_scale(norm, threshold):
    """The factor ``tf.clip_by_global_norm`` applies: threshold / max(norm, threshold)."""
    return threshold / ops.maximum(norm, threshold)


def push_curvature(window, sq_norm, step):
    """Write ``||g||^2 + EPS`` at slot ``t mod width``; return the new window and
    the min and max over its filled part (the last ``min(t + 1, width)`` samples)."""
    width = window.shape[0]
    slots = ops.arange(width, dtype="int32")
    step = ops.cast(step, "int32")
    window = ops.where(ops.equal(slots, step % width), sq_norm + EPS,
                       getattr(window, "value", window))  # a variable's value (JAX takes no variable)
    filled = ops.less_equal(slots, step)
    low = ops.min(ops.where(filled, window, math.inf))
    high = ops.max(ops.where(filled, window, -math.inf))
    return window, low, high


def estimates(opt, h_min_avg, h_max_avg, var_avg, dist_avg, sparsity_avg=None):
    """(h_min, h_max, C, D) from the stored averages and ``opt``'s options."""
    h_min = ops.exp(h_min_avg) if opt.h_min_log_smooth else h_min_avg
    h_max = ops.exp(h_max_avg) if opt.h_max_log_smooth else h_max_avg
    grad_var = ops.maximum(var_avg, EPS)
    dist = dist_avg
    if sparsity_avg is not None:
        # Sparse gradients overstate the dense gradient's norm (authors'
        # grad_sparsity): scale curvatures and variance by the average
        # density, divide the distance by its root.
        density = ops.maximum(sparsity_avg, EPS)
        h_min, h_max, grad_var = h_min * density, h_max * density, grad_var * density
        dist = dist / ops.sqrt(density)
    return h_min, h_max, grad_var, dist


def stored_estimates(opt):
    """(h_min, h_max, C, D) of ``opt``'s stored averages, read now (not later,
    after the update has assigned the variables)."""
    names = ("h_min_avg", "h_max_avg", "grad_var_avg", "dist_avg") + \
        (("sparsity_avg",) if opt.sparsity_debias else ())
    return estimates(opt, *[ops.copy(getattr(opt, "_" + name)) for name in names])


#: Tensors of at least this many elements are summed in rows (``_square_sums``);
#: smaller ones are summed together, concatenated (``_grouped_square_sums``).
_ROWS_FROM = 1 << 16
_ROW = 1024


def _row_width(size):
    """The widest row, at most 1024 elements, that tiles ``size`` elements
    (None: none of 64 or more does)."""
    return next((w for w in range(min(size, _ROW), 63, -1) if size % w == 0), None)


def _accelerated():
    """Whether the backend computes on an accelerator, not the CPU (asked when
    tracing, not on import, which would freeze TensorFlow's device
    configuration)."""
    return devices.compute_device() != "CPU"


def _square_sums(terms):
    """The sums of squares of same-shaped float32 tensors, as a vector.

    The terms are stacked and squared together (one op each without XLA). On
    the CPU a big tensor's squares are summed as ``reshape(t, (R, W)) @
    ones(W)``, then over the ``R`` row sums: XLA:CPU fuses the stacking and
    squaring into that matrix-vector product and splits its rows over the
    threads, reading each input once. A direct sum to a scalar there
    materialises the squares and reduces them through a tree of reduce-windows,
    4-5x slower on the 27M-parameter benchmark (``benchmarks/optimizer_step.py``).
    On other devices, and for small tensors, the sums are plain reductions.
    """
    size = math.prod(terms[0].shape)
    width = _row_width(size) if size >= _ROWS_FROM and not _accelerated() else None
    if width is None:
        stacked = ops.square(ops.stack(terms))
        return ops.sum(stacked, axis=tuple(range(1, len(stacked.shape))))
    rows = ops.square(ops.stack([ops.reshape(t, (-1, width)) for t in terms], axis=1))
    return ops.sum(ops.tensordot(rows, ops.ones((width,), rows.dtype), axes=[[2], [0]]), axis=0)


def _flat(tensors):
    """The tensors as one float32 vector, zero-padded to whole rows of 1024."""
    flat = [ops.reshape(ops.cast(t, _F32), (-1,)) for t in tensors]
    padding = -sum(math.prod(t.shape) for t in tensors) % _ROW
    if padding:
        flat.append(ops.zeros((padding,), _F32))
    return flat[0] if len(flat) == 1 else ops.concatenate(flat, axis=0)


def _grouped_square_sums(grads, averages, terms):
    """``sum`` over the variables of ``_square_sums(terms(g, avg))``.

    Big variables are summed one by one; the small ones as one concatenated
    vector (a model's biases and small kernels: one reduction instead of
    one per variable, whose fixed costs dominate there). The zero padding adds
    nothing to a sum of squares of ``terms``, which must map zeros to zeros."""
    big = [(g, avg) for g, avg in zip(grads, averages) if math.prod(g.shape) >= _ROWS_FROM]
    small = [(g, avg) for g, avg in zip(grads, averages) if math.prod(g.shape) < _ROWS_FROM]
    parts = [_square_sums(terms(ops.cast(g, _F32), ops.cast(avg, _F32))) for g, avg in big]
    if small:
        gs, avgs = zip(*small)
        parts.append(_square_sums(terms(_flat(gs), _flat(avgs))))
    return parts[0] if len(parts) == 1 else ops.sum(ops.stack(parts), axis=0)


GradientSums = collections.namedtuple("GradientSums", "sq_norm deviation nonzero")
GradientSums.__doc__ = """The reductions of one update's gradient ``g`` (before any clipping),
in one pass: ``sq_norm = ||g||^2``, ``deviation = ||g - avg(g)||^2`` (the stored
average, before this update), ``nonzero`` = the count of nonzero entries
(None unless asked for)."""


def gradient_sums(grads, averages, count_nonzero=False):
    """``GradientSums`` of ``grads`` against their stored ``averages``.

    ``sq_norm`` is NaN or inf iff an entry is (or ``||g||^2`` overflows float32)."""
    def terms(g, avg):
        if not count_nonzero:
            return [g, g - avg]
        return [g, g - avg, ops.cast(ops.not_equal(g, 0.0), _F32)]  # squared: still 0 or 1

    total = _grouped_square_sums(grads, averages, terms)
    return GradientSums(total[0], total[1], total[2] if count_nonzero else None)


def scaled_deviation(grads, averages, scale):
    """``||scale * g - avg(g)||^2``, the deviation of a clipped gradient."""
    return _grouped_square_sums(grads, averages, lambda g, avg: [g * scale - avg])[0]


Measurement = collections.namedtuple(
    "Measurement", "estimates avg_weight scale norm finite state")
Measurement.__doc__ = """What ``measure`` found: the new (h_min, h_max, C, D), ``k`` of the
averages, the clip factor of ``g`` (None: 1) and ``||g||``, whether the statistics
are finite (False: skip the update), and the new values of ``opt``'s scalar
state as (variable, value) pairs, for the caller to store."""


def measure(opt, grads, averages, sums, step, tuning, h_max_prev):
    """Clip for the statistics and average them with ``g``: a ``Measurement``.

    ``sums`` are ``gradient_sums(grads, averages)``. ``g`` is ``grads`` clipped
    to ``opt.clip_thresh`` and, from the second update on, to
    ``sqrt(stat_protect_fac * h_max_prev)``. The per-parameter average
    ``avg(g) <- avg(g) + k (g - avg(g))`` is left to the caller, which writes
    it with the step. Nothing is assigned here.
    """
    raw_sq = sums.sq_norm
    scale = None
    if opt.clip_thresh is not None:
        scale = clip_scale(ops.sqrt(raw_sq), opt.clip_thresh)
    if opt.use_adaptive_clip:
        norm = ops.sqrt(raw_sq) if scale is None else ops.sqrt(raw_sq) * scale
        limit = ops.sqrt(opt.stat_protect_fac * h_max_prev)
        protect = ops.where(tuning, clip_scale(norm, limit), 1.0)
        scale = protect if scale is None else scale * protect
    sq_norm = raw_sq if scale is None else raw_sq * ops.square(scale)
    norm = ops.sqrt(sq_norm)
    k, keep = ema_weights(opt.beta, ops.cast(step, _F32), opt.zero_debias)
    state = []

    def average(name, value):
        var = getattr(opt, "_" + name)
        new = var + k * (value - var)
        state.append((var, new))
        return new

    # C = avg(||g||^2) - ||avg(g)||^2 in its incremental form,
    # C <- (1 - k) C + k (1 - k) ||g - avg(g)||^2: equal, without the cancellation.
    # A clipped g (scale < 1, rare) needs a pass of its own: expanding
    # ||s g - avg||^2 in sums of the unclipped g would cancel.
    deviation = sums.deviation
    if scale is not None:
        deviation = ops.cond(ops.less(scale, 1.0),
                             lambda: scaled_deviation(grads, averages, scale),
                             lambda: sums.deviation)
    # The skip test reads the deviation too, which orders that pass before the
    # step's writes of avg(g) (XLA would otherwise copy avg(g) to keep it).
    finite = ops.logical_and(ops.isfinite(raw_sq), ops.isfinite(deviation))
    grad_var = keep * opt._grad_var_avg + k * keep * deviation
    state.append((opt._grad_var_avg, grad_var))

    window, low, high = push_curvature(opt._curv_win, sq_norm, step)
    state.append((opt._curv_win, window))
    h_min = average("h_min_avg", ops.log(low) if opt.h_min_log_smooth else low)
    h_max = average("h_max_avg", ops.log(high) if opt.h_max_log_smooth else high)
    sq_avg = average("grad_norm_sq_avg", sq_norm)
    norm_avg = average("grad_norm_avg", norm)
    dist = average("dist_avg", norm_avg / (sq_avg + EPS))
    sparsity = None
    if opt.sparsity_debias:
        size = sum(math.prod(g.shape) for g in grads)
        sparsity = average("sparsity_avg", sums.nonzero / size)
    return Measurement(estimates(opt, h_min, h_max, grad_var, dist, sparsity), k, scale, norm,
                       finite, state)


def solve_sqrt_mu(p):
    """The root ``x`` in (0, 1) of ``p x = (1 - x)^3``.

    ``x = sqrt(mu)`` minimising ``x^2 D^2 + (1 - x)^4 C / h_min^2`` solves
    ``(1 - x)^3 = p x`` with ``p = D^2 h_min^2 / (2 C)`` (paper, Appendix D).
    With ``s = 1 - x`` this is ``s^3 + p s - p = 0``, and Vieta's substitution
    ``s = a - p / (3 a)`` gives ``a^3 = p (1 + sqrt(1 + 4 p / 27)) / 2``. The
    direct form ``a - p / (3 a)`` cancels catastrophically for large ``p``
    (low noise, where ``x ~ 1/p``), so it is rewritten without differences:
    ``s = (a^3 - b^3) / (a^2 + a b + b^2) = p / (a^2 + p/3 + b^2)`` with
    ``b = p / (3 a)``, and ``x = 1 - s`` for small ``s``, ``x = s^3 / p``
    otherwise. Accurate to a few float32 ulps for any ``p`` in (1e-30, 1e30).
    """
    p = ops.maximum(p, 1e-30)
    root = ops.sqrt(1.0 + p * (4.0 / 27.0))
    third = 1.0 / 3.0
    a = ops.power(p, third) * ops.power((1.0 + root) * 0.5, third)
    b = p / (3.0 * a)
    s = p / (a * a + p / 3.0 + b * b)
    return ops.where(s < 0.5, 1.0 - s, s * s * s / p)


def single_step(grad_var, dist, h_min, h_max):
    """SingleStep: ``(mu, alpha)`` for the measured C, D, h_min, h_max.

    ``sqrt(mu) = max(x, (sqrt(h_max/h_min) - 1) / (sqrt(h_max/h_min) + 1))``
    (the robust region must hold the whole curvature range) and
    ``alpha = (1 - sqrt(mu))^2 / h_min``.
    """
    p = ops.square(dist * h_min) / (2.0 * grad_var)
    x = solve_sqrt_mu(p)
    ratio = ops.sqrt(ops.maximum(h_max / h_min, 1.0))
    sqrt_mu = ops.maximum(x, (ratio - 1.0) / (ratio + 1.0))
    return ops.square(sqrt_mu), ops.square(1.0 - sqrt_mu) / h_min
