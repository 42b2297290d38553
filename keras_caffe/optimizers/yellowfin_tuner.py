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
"""

import math

from keras import ops

#: The authors' absolute guard (``EPS`` in JianGoForIt/YellowFin,
#: tuner_utils/yellowfin.py): added to each curvature sample, floor of the
#: variance, added to the distance's denominator, floor of the sparsity.
EPS = 1e-6

_F32 = "float32"


def ema_weight(beta, step, zero_debias):
    """``k_t`` of the averages at update ``step`` (0-based, a float tensor)."""
    if not zero_debias:
        return ops.convert_to_tensor(1.0 - beta, _F32)
    # 1 - beta^(t+1) as -expm1((t+1) log(beta)): exact to float32 even at t = 0,
    # where the naive form loses 4 digits (k_0 must be exactly 1).
    return (1.0 - beta) / -ops.expm1((step + 1.0) * math.log(beta))


def clip_scale(norm, threshold):
    """The factor ``tf.clip_by_global_norm`` applies: threshold / max(norm, threshold)."""
    return threshold / ops.maximum(norm, threshold)


def push_curvature(window, sq_norm, step):
    """Write ``||g||^2 + EPS`` at slot ``t mod width``; return the new window and
    the min and max over its filled part (the last ``min(t + 1, width)`` samples)."""
    width = window.shape[0]
    slots = ops.arange(width, dtype="int64")
    step = ops.cast(step, "int64")
    window = ops.where(ops.equal(slots, step % width), sq_norm + EPS, window)
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


def measure(opt, grads, variables, raw_sq, step, tuning, h_max_prev):
    """Clip for the statistics and update every average of ``opt`` with ``g``.

    ``raw_sq`` is ``||grads||^2``, already computed for the finiteness test.
    ``g`` is ``grads`` clipped to ``opt.clip_thresh`` and, from the second
    update on, to ``sqrt(stat_protect_fac * h_max_prev)``. Returns the new
    (h_min, h_max, C, D), the scale that made ``g`` (None: 1) and ``||g||``.
    """
    g32 = [ops.cast(g, _F32) for g in grads]
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
    k = ema_weight(opt.beta, ops.cast(step, _F32), opt.zero_debias)

    def average(name, value):
        var = getattr(opt, "_" + name)
        new = var + k * (value - var)
        opt.assign(var, new)
        return new

    # C = avg(||g||^2) - ||avg(g)||^2 in its incremental form,
    # C <- (1 - k) C + k (1 - k) ||g - avg(g)||^2: equal, without the cancellation.
    deviation = []
    for g, variable in zip(g32, variables):
        avg = opt.slot(opt.grad_avg, variable)
        diff = (g if scale is None else g * scale) - ops.cast(avg, _F32)
        deviation.append(ops.sum(ops.square(diff)))
        opt.assign(avg, ops.cast(avg, _F32) + k * diff)
    grad_var = (1.0 - k) * opt._grad_var_avg + k * (1.0 - k) * ops.sum(ops.stack(deviation))
    opt.assign(opt._grad_var_avg, grad_var)

    window, low, high = push_curvature(opt._curv_win, sq_norm, step)
    opt.assign(opt._curv_win, window)
    h_min = average("h_min_avg", ops.log(low) if opt.h_min_log_smooth else low)
    h_max = average("h_max_avg", ops.log(high) if opt.h_max_log_smooth else high)
    sq_avg = average("grad_norm_sq_avg", sq_norm)
    norm_avg = average("grad_norm_avg", norm)
    dist = average("dist_avg", norm_avg / (sq_avg + EPS))
    sparsity = None
    if opt.sparsity_debias:
        size = sum(math.prod(g.shape) for g in g32)
        nonzero = ops.sum(ops.stack([ops.count_nonzero(g) for g in g32]))
        sparsity = average("sparsity_avg", ops.cast(nonzero, _F32) / size)
    return estimates(opt, h_min, h_max, grad_var, dist, sparsity), scale, norm


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
