"""Running an LMS plan: rematerialized and host-staged blocks, and the
device's memory and speed.

Both mechanisms recompute or copy, they never approximate, so a step gives
the same loss and gradients as without LMS. Both are one
``tf.custom_gradient`` around the block's sub-model (``_recomputing``):

- ``remat``: the forward pass keeps the block's inputs; the backward pass
  runs the block again from them under a tape and differentiates it.
- ``stage``: the same, with the inputs kept as a copy on ``/CPU:0`` (host
  memory) between the passes and copied back to the compute device for the
  backward pass. Under XLA (``jit_compile``) device placement inside the
  compiled function is ignored, so staging is never chosen there.

The recomputation starts from the saved inputs plus an exact ``+ 0`` that
ties it to the incoming gradient, so it runs on the backward pass and not
before. The block's trainable weights are read once, before the block runs
forward (``read_values``: tensors, the same read eagerly as in a
``tf.function``), and both passes use those values
(``keras.StatelessScope``); their gradients reach the variables through the
reads. So the backward pass reads no variable again: every read is a data
ancestor of the loss, hence of every update, as without LMS. ``keras.remat``
(``tf.recompute_grad``) reads the weights again in the backward pass,
ordered before the optimizer's update of the same weights by a control edge
only, and that was measured to fail: on TensorFlow 2.18 and 2.21 with
Eigen's CPU kernels (2 cores, under load), training the golden SGD net with
``LMS(threshold_kb=0)`` through ``keras.remat`` computed, 3 times in about
43,000 steps (runs of 40 steps; it only ever struck within a run's first
40), ``ip1``'s gradient with ``ip2``'s weights as that same step's update
had left them (a float64 replay with the updated weights reproduces the
wrong step exactly); it did not happen with Grappler's dependency optimizer
off. ``tests/lms/test_lms_ordering.py`` checks the ordering on the graph,
``benchmarks/lms_race.py`` counts wrong steps.

Eagerly (a ``tf.GradientTape`` step outside ``tf.function``,
``model.fit(run_eagerly=True)``), ``tf.custom_gradient`` lets the caller's
tape record the forward pass's ops too, and the tape would keep the block's
activations until it is done; the forward pass runs on ``tf.stop_gradient``
of its inputs and weights, so the tape keeps the block's inputs and outputs
only, as the gradient of a ``tf.function`` does.

A ``remat`` block with ``chunks`` > 1 (Eigen's kernels, per-sample layers;
see ``lms_graph``) runs its forward over parts of the batch and joins them;
recomputed under the tape, the parts' weight gradients are summed.

The layers are the model's own: every block is a ``keras.Model`` over the
original graph's tensors, so it shares the model's layers and variables.
"""

import ctypes
import logging
import platform

import keras
import tensorflow as tf

from keras_caffe.lms.plan import output_structure, part_sizes

LOG = logging.getLogger("keras_caffe.lms")
HOST = "/CPU:0"


# -- blocks ---------------------------------------------------------------------------


class Runner:
    """One block of a plan, ready to call: ``runner(values, training) -> values``."""

    def __init__(self, block):
        self.block = block
        self.model = keras.Model(list(block.inputs), list(block.outputs),
                                 name=f"lms_{block.kind}_{block.nodes[0].name}")

    def _forward(self, training):
        def whole(*xs):
            out = self.model(list(xs), training=training)
            return list(out) if isinstance(out, (list, tuple)) else [out]

        def in_parts(*xs):
            sizes = batch_parts(xs, self.block.chunks)
            if sizes is None:
                return whole(*xs)
            parts = [tf.split(x, sizes) for x in xs]
            outs = [whole(*(p[i] for p in parts)) for i in range(len(sizes))]
            return [tf.concat(list(o), 0) for o in zip(*outs)]

        return in_parts if self.block.chunks > 1 else whole

    def __call__(self, args, training):
        kind = self.block.kind
        if kind in ("remat", "stage"):
            weights = self.model.trainable_variables
            run = _recomputing(self._forward(training), weights, host=kind == "stage")
            return run(list(args), read_values(weights))
        return self._forward(training)(*args)


def read_values(weights):
    """The current values of the Keras variables ``weights``, read once, as
    tensors: ``tf.convert_to_tensor`` of ``variable.value`` (the backend's
    ``tf.Variable``, or the value an enclosing ``keras.StatelessScope`` gives
    it), so a tape recording the read carries the gradient on to the variable.

    Not ``keras.ops.convert_to_tensor(variable)``: it returns a Keras variable
    unchanged (a tensor type to ``tf.is_tensor``). In a ``tf.function``,
    ``tf.custom_gradient`` converts it to a tensor itself, the same read as
    here; eagerly it hands it on as is, and ``GradientTape.watch`` refuses
    it (``ValueError: Passed in object <Variable path=...> of type
    'Variable', not tf.Tensor or tf.Variable``)."""
    return [tf.convert_to_tensor(w.value) for w in weights]


def batch_parts(xs, chunks):
    """``part_sizes`` of the batch of ``xs`` (tensors with the same first
    axis), or None where that axis is not static or there is nothing to split."""
    batch = _static_batch(xs)
    if batch is None or any(x.shape[0] != batch for x in xs) or min(chunks, batch) < 2:
        return None
    return part_sizes(batch, chunks)


def _after(tensor, dependency):
    """``tensor + 0`` with the 0 computed from ``dependency``: exact (x + 0 = x,
    NaN stays NaN) and scheduled after ``dependency`` exists, as
    ``tf.recompute_grad`` does. A data dependency, which no graph rewrite
    drops (XLA ignores control dependencies)."""
    first = tf.reduce_max(tf.reshape(dependency, [-1])[:1])
    ok = tf.cast(first, tf.bool)
    zero = tf.where(tf.equal(ok, ok), 0.0, float("nan"))
    return tensor + tf.cast(zero, tensor.dtype)


def _recomputing(forward, weights, host=False):
    """``run(xs, values)``: ``forward`` (tensors -> list of tensors) with the
    variables ``weights`` taking ``values`` (read by the caller, so the
    outer tape carries their gradients on to the variables), keeping only
    ``xs`` and ``values`` for the backward pass (``xs`` on the host if
    ``host``) and recomputing from them."""

    def run_with(values, xs):
        with keras.StatelessScope(state_mapping=list(zip(weights, values))):
            return forward(*xs)

    @tf.custom_gradient
    def inner(*flat):
        xs, values = list(flat[:len(flat) - len(weights)]), list(flat[len(flat) - len(weights):])
        # Eagerly, tf.custom_gradient lets the caller's tapes record the
        # forward pass's ops too, and a tape keeps what each op's gradient
        # needs: every activation of the block, until the tape is done. The
        # block's gradient is ``grad``'s alone, so the tapes see none of it.
        ys = run_with([tf.stop_gradient(v) for v in values], [tf.stop_gradient(x) for x in xs])
        device = xs[0].device if xs else ""
        if host:
            with tf.device(HOST):
                saved = [tf.identity(x) for x in xs]
        else:
            saved = xs

        def grad(*dys, variables=None):
            with tf.device(device or None):
                back = [_after(tf.identity(s), dys[0]) for s in saved]
                with tf.GradientTape() as tape:
                    tape.watch(back + values)
                    again = run_with(values, back)
                grads = tape.gradient(again, back + values, output_gradients=list(dys),
                                      unconnected_gradients=tf.UnconnectedGradients.ZERO)
            # Variables read inside (none but the non-trainable ones a
            # layer reads itself) get no gradient from the block.
            return grads, [tf.zeros_like(v) for v in variables or []]

        return ys, grad

    return lambda xs, values: inner(*xs, *values)


def install(model, plans):
    """Make ``model``'s calls run through ``plans(batch)`` (a function
    returning runners for a batch size). The model keeps its layers,
    weights, config and saving; only its call changes. ``uninstall`` undoes it."""

    flat_inputs = tuple(keras.tree.flatten(model.inputs))
    output_struct = output_structure(model)
    flat_outputs = tuple(keras.tree.flatten(output_struct))

    def call(inputs, training=None, mask=None, **kwargs):
        xs = _flatten_inputs(inputs, flat_inputs)
        values = {id(t): keras.ops.convert_to_tensor(x, dtype=t.dtype)
                  for t, x in zip(flat_inputs, xs)}
        batch = _static_batch(values.values())
        for runner in plans(batch):
            outs = runner([values[id(t)] for t in runner.block.inputs], training)
            values.update(zip((id(t) for t in runner.block.outputs), outs))
        return keras.tree.pack_sequence_as(output_struct, [values[id(t)] for t in flat_outputs])

    model.call = call
    return model


def uninstall(model):
    """Undo ``install``: the model calls its own graph again."""
    if "call" in vars(model):
        del model.call


def _flatten_inputs(inputs, flat_inputs):
    if isinstance(inputs, dict):
        names = [t.name for t in flat_inputs]
        if all(n in inputs for n in names):
            return [inputs[n] for n in names]
    xs = keras.tree.flatten(inputs)
    if len(xs) != len(flat_inputs):
        raise ValueError(f"the model takes {len(flat_inputs)} input(s), got {len(xs)}")
    return xs


def _static_batch(tensors):
    for x in tensors:
        shape = getattr(x, "shape", ())
        if len(shape) and shape[0] is not None:
            return int(shape[0])
    return None


# -- host memory ---------------------------------------------------------------------------

#: glibc's ``mallopt`` parameter, and the largest value it accepts on 64-bit
#: (``HEAP_MAX_SIZE / 2``)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_MAX = 32 * 2 ** 20
MMAP_THRESHOLD_MIN = 128 * 2 ** 10


def return_freed_blocks(threshold_bytes):
    """Make the C allocator hand freed blocks of ``threshold_bytes`` or more
    back to the system at once; returns the threshold set, or None where
    nothing was changed (not glibc, or ``mallopt`` refused).

    TensorFlow's CPU tensors come from ``malloc``. glibc serves blocks of
    128 KiB and more by ``mmap`` and unmaps them when freed, but once such a
    block is freed it raises that threshold to the block's size (up to
    32 MiB), so later activations of that size come from its heaps, whose
    freed memory stays with the process and counts against RLIMIT_DATA and
    the cgroup limit. LMS's plan frees activations and assumes the memory
    is free again; measured on TF 2.21 (24 x Conv 3x3 + ReLU, 16 MiB per
    activation), the retained memory raised LMS's step peak from 377 MiB to
    694 MiB with Eigen's kernels. Setting ``M_MMAP_THRESHOLD`` fixes the
    threshold (glibc then stops adjusting it); the cost is fresh, zeroed
    pages for every large tensor. Process-wide: the last plan's value holds.
    """
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    value = int(min(max(threshold_bytes, MMAP_THRESHOLD_MIN), MMAP_THRESHOLD_MAX))
    try:
        ok = ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, value)
    except (OSError, AttributeError):
        return None
    return value if ok == 1 else None
