"""A float64 numpy port of BVLC Caffe's solver update, independent of
keras-caffe: what ``Solver::Step`` does to the parameters once the diffs of
one iteration are known.

Sources (BVLC Caffe master 9b891540):

- ``src/caffe/net.cpp``, ``Net::Init``: a parameter whose ``lr_mult`` is 0
  gets ``param_propagate_down = false`` ("param_need_backward =
  param_spec->lr_mult() != 0"), so its diff is never computed and stays at
  the 0 that ``ClearParamDiffs`` wrote; it is still one of
  ``learnable_params()``.
- ``src/caffe/solvers/sgd_solver.cpp``, ``SGDSolver::ApplyUpdate``:
  ``ClipGradients()`` (the L2 norm over every learnable param's diff, all
  scaled by ``clip_gradients / norm`` above it), then per param
  ``Normalize`` (diff /= iter_size), ``Regularize`` (diff += weight_decay x
  decay_mult x w, or x sign(w) for L1), ``ComputeUpdateValue`` with
  ``local_rate = rate x lr_mult``; ``Net::Update`` subtracts the diff.
- ``ComputeUpdateValue`` of ``sgd_solver.cpp``, ``nesterov_solver.cpp``,
  ``adagrad_solver.cpp``, ``rmsprop_solver.cpp``, ``adadelta_solver.cpp``,
  ``adam_solver.cpp``: the formulas in ``solver_step``.
"""

import numpy as np


def solver_step(solver, hp, p, g, local_rate, state, i, it):
    """One ``ComputeUpdateValue`` of param ``i`` (float64): the value to
    subtract. ``state`` holds the history blobs, keyed ("h", i), ("h2", i),
    ("v", i); ``it`` is Caffe's iteration (0 first)."""
    m, delta = hp.get("momentum", 0.0), hp.get("delta", 1e-8)
    h = state.setdefault(("h", i), np.zeros_like(p))
    if solver == "SGD":
        h = m * h + local_rate * g
        step = h
    elif solver == "Nesterov":
        h_new = m * h + local_rate * g
        step, h = (1 + m) * h_new - m * h, h_new
    elif solver == "AdaGrad":
        h = h + g * g
        step = local_rate * g / (np.sqrt(h) + delta)
    elif solver == "RMSProp":
        d = hp["rms_decay"]
        h = d * h + (1 - d) * g * g
        step = local_rate * g / (np.sqrt(h) + delta)
    elif solver == "AdaDelta":
        h = m * h + (1 - m) * g * g
        h2 = state.setdefault(("h2", i), np.zeros_like(p))
        u = g * np.sqrt((h2 + delta) / (h + delta))
        state[("h2", i)] = m * h2 + (1 - m) * u * u
        step = local_rate * u
    elif solver == "Adam":
        b2 = hp["momentum2"]
        h = m * h + (1 - m) * g
        v = state[("v", i)] = b2 * state.get(("v", i), 0.0) + (1 - b2) * g * g
        t = it + 1
        step = local_rate * np.sqrt(1 - b2 ** t) / (1 - m ** t) * h / (np.sqrt(v) + delta)
    else:
        raise ValueError(f"unknown solver {solver!r}")
    state[("h", i)] = h
    return step


def apply_update(solver, hp, params, diffs, state, it, lr_mults=None, decay_mults=None,
                 clip_gradients=None, iter_size=1, regularization="L2", net_init_rule=True):
    """``SGDSolver::ApplyUpdate`` on float64 ``params``: ``diffs`` are the
    backward's diffs (summed over ``iter_size`` micro-batches); a param with
    ``lr_mult`` 0 has none (``Net::Init``), whatever ``diffs`` says.
    ``net_init_rule=False`` leaves that rule out (the frozen diff is kept:
    what keras-caffe did before issue 14), to show a case tells them apart.
    Returns the new params; ``state`` is updated in place."""
    n = len(params)
    lr_mults = [1.0] * n if lr_mults is None else list(lr_mults)
    decay_mults = [1.0] * n if decay_mults is None else list(decay_mults)
    diffs = [np.zeros_like(p) if lr == 0 and net_init_rule else np.asarray(d, np.float64)
             for p, d, lr in zip(params, diffs, lr_mults)]
    if clip_gradients is not None and clip_gradients >= 0:
        norm = np.sqrt(sum(float(np.sum(d * d)) for d in diffs))
        state["clipped"] = state.get("clipped", 0) + int(norm > clip_gradients)
        if norm > clip_gradients:
            diffs = [d * (clip_gradients / norm) for d in diffs]
    out = []
    for i, (p, d) in enumerate(zip(params, diffs)):
        d = d / iter_size
        decay = hp.get("weight_decay", 0.0) * decay_mults[i]
        if decay:
            d = d + decay * (p if regularization == "L2" else np.sign(p))
        out.append(p - solver_step(solver, hp, p, d, hp["lr"] * lr_mults[i], state, i, it))
    return out


def mlp_softmax_diffs(params, x, y):
    """float64 diffs of the mean softmax cross-entropy (SoftmaxWithLoss,
    VALID) of InnerProduct -> ReLU -> InnerProduct, params in Keras's layout
    ((in, out) kernels): ``[dW1, db1, dW2, db2]``."""
    w1, b1, w2, b2 = params
    z1 = x @ w1 + b1
    h = np.maximum(z1, 0.0)
    z2 = h @ w2 + b2
    p = np.exp(z2 - z2.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    dz2 = (p - np.eye(z2.shape[1])[y]) / len(x)
    dz1 = (dz2 @ w2.T) * (z1 > 0)
    return [x.T @ dz1, dz1.sum(0), h.T @ dz2, dz2.sum(0)]
