"""``keras-caffe time``: forward and backward time per layer, as ``caffe time``.

Caffe's ``time`` command (tools/caffe.cpp ``time()``) builds the net (TRAIN
phase by default), runs one forward and backward pass, then, for each of
``iterations`` iterations, calls every layer's ``Forward`` in order and
every layer's ``Backward`` in reverse order, timing each call and each whole
pass. It prints the average (the sum over iterations divided by their
number) of every layer's forward and backward time, the average forward
pass, backward pass and forward-backward, and the total time, all measured.

Here the same loop runs over every layer of the Caffe net, with Caffe's
layer names, data and loss layers included:

- a data layer's forward is the read of the next batch from the net's
  ``tf.data`` pipeline (all data layers' tops come in one read, listed
  under the first data layer); an ``Input`` layer does nothing, as
  Caffe's ``InputLayer``;
- a layer that became Keras layers: forward is their call (one
  ``tf.function`` each, XLA with ``jit_compile``) on the activations of a
  batch; backward is a function that returns only the gradients to its
  floating-point inputs (not to the net's data, which Caffe does not
  propagate to either) and its weights for a random upstream gradient:
  TensorFlow prunes the forward operations the gradients do not need (a
  convolution's), and recomputes those they do (a ReLU's or a pooling's
  output, which their gradients read);
- a loss or Accuracy layer: forward is the loss (or the accuracy) of the
  prediction and label blobs; backward the loss's gradient to the
  prediction (an Accuracy has none);
- a layer with no computation of its own (fused into the layer before it,
  or one the importer turns into wiring) is listed with 0 and a note.

The forward and backward passes are timed around the whole loop, so the
per-layer times plus the remainder ("framework / not attributed": Python's
dispatch between the calls) equal the measured pass. The total time is the
wall time of all iterations. A training step runs the net as one compiled
function, which saves the per-layer dispatch: that function's forward and
forward-backward times are reported too ("one compiled step").
"""

import time

import keras
import numpy as np
import tensorflow as tf

from keras_caffe.analysis.tables import Column, Grid, print_grid
from keras_caffe.errors import KerasCaffeError
from keras_caffe.importers import layer_types
from keras_caffe.importers.data.pipelines import net_pipeline
from keras_caffe.importers.layer_types._data import producing_types
from keras_caffe.importers.net.blobs import caffe_parts
from keras_caffe.importers.net.importing import import_net
from keras_caffe.caffe_log import CaffeLog, number
from keras_caffe.training.step import NetOutputs, resolve_jit

#: The remainder row's name.
REMAINDER = "framework / not attributed"


class LayerTime:
    """One Caffe layer's average forward and backward milliseconds."""

    def __init__(self, name, type, forward_ms, backward_ms, note=""):
        self.name, self.type, self.note = name, type, note
        self.forward_ms, self.backward_ms = forward_ms, backward_ms

    def to_dict(self):
        return {"name": self.name, "type": self.type, "forward_ms": self.forward_ms,
                "backward_ms": self.backward_ms, "note": self.note}


class TimingReport:
    """Per-layer and whole-net times in milliseconds, averages over the
    iterations (Caffe's); ``total_ms`` is the wall time of all iterations."""

    def __init__(self, net_name, iterations, layers, forward_ms, backward_ms, total_ms,
                 compiled_forward_ms, compiled_forward_backward_ms, initial_loss, device, jit):
        self.net_name, self.iterations, self.layers = net_name, iterations, layers
        self.forward_ms, self.backward_ms, self.total_ms = forward_ms, backward_ms, total_ms
        self.forward_backward_ms = total_ms / iterations
        self.compiled_forward_ms = compiled_forward_ms
        self.compiled_forward_backward_ms = compiled_forward_backward_ms
        self.initial_loss, self.device, self.jit = initial_loss, device, jit

    @property
    def remainder(self):
        """``(forward, backward)`` ms of the passes that no layer's call took."""
        return (self.forward_ms - sum(t.forward_ms for t in self.layers),
                self.backward_ms - sum(t.backward_ms for t in self.layers))

    def to_dict(self):
        forward, backward = self.remainder
        return {"net": self.net_name, "iterations": self.iterations, "device": self.device,
                "jit": self.jit, "initial_loss": self.initial_loss,
                "units": "milliseconds, averages over the iterations (total_ms: all of them)",
                "layers": [t.to_dict() for t in self.layers],
                "remainder": {"name": REMAINDER, "forward_ms": forward, "backward_ms": backward},
                "forward_ms": self.forward_ms, "backward_ms": self.backward_ms,
                "forward_backward_ms": self.forward_backward_ms, "total_ms": self.total_ms,
                "compiled_step": {"forward_ms": self.compiled_forward_ms,
                                  "forward_backward_ms": self.compiled_forward_backward_ms}}


class _Step:
    """One Caffe layer's forward and backward as blocking calls."""

    def __init__(self, name, type, forward=None, backward=None, note=""):
        self.name, self.type, self.note = name, type, note
        self.forward = forward or _nothing
        self.backward = backward or _nothing
        self.forward_s = self.backward_s = 0.0


def _nothing():
    return None


def _sync_function():
    """Wait for the device: GPU work is asynchronous, CPU work is done on return."""
    if tf.config.list_logical_devices("GPU"):
        return tf.test.experimental.sync_devices
    return _nothing


def time_net(net, *, iterations=50, phase="TRAIN", data_format="channels_last",
             jit_compile="auto", input_shapes=None):
    """Time ``net`` (a prototxt path, its text or a NetParameter) as ``caffe
    time`` does (see the module docstring); returns a ``TimingReport``.
    ``input_shapes`` as ``import_model``'s."""
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise KerasCaffeError(f"time: iterations must be an integer >= 1, got {iterations!r}")
    jit = resolve_jit(jit_compile)
    imported = import_net(net, phase=phase, data_format=data_format, input_shapes=input_shapes)
    batch, reader = _first_batch(imported, phase, data_format)
    training = phase == "TRAIN"
    steps = _steps(imported, batch, reader, training, jit)
    sync = _sync_function()
    for step in steps:  # Caffe's clean forward and backward pass: tracing, allocation
        step.forward()
    for step in reversed(steps):
        step.backward()
    sync()
    forward_s = backward_s = 0.0
    total_start = time.perf_counter()
    for _ in range(iterations):
        forward_s += _timed_pass(steps, "forward", sync)
        backward_s += _timed_pass(steps[::-1], "backward", sync)
    total_ms = (time.perf_counter() - total_start) * 1e3
    rows = [LayerTime(s.name, s.type, s.forward_s * 1e3 / iterations,
                      s.backward_s * 1e3 / iterations, s.note) for s in steps]
    initial_loss, compiled_fwd, compiled_fwd_bwd = _compiled_step(
        imported.model, batch, training, jit, iterations, sync)
    device = (tf.config.list_logical_devices("GPU")
              or tf.config.list_logical_devices("CPU"))[0].name
    return TimingReport(imported.model.name, iterations, rows, forward_s * 1e3 / iterations,
                        backward_s * 1e3 / iterations, total_ms, compiled_fwd, compiled_fwd_bwd,
                        initial_loss, device, jit)


def _timed_pass(steps, which, sync):
    """One pass over ``steps``: each step's time added to it; the pass's seconds."""
    start = time.perf_counter()
    for step in steps:
        t = time.perf_counter()
        getattr(step, which)()
        sync()
        setattr(step, f"{which}_s", getattr(step, f"{which}_s") + time.perf_counter() - t)
    return time.perf_counter() - start


def _first_batch(imported, phase, data_format):
    """``(batch, read)``: one batch for the net and a function that reads the
    next one (None when the net has only Input layers). A net with data
    layers reads their pipelines; plain Input layers get random normal
    values (as ``caffe time`` runs on whatever its input blobs hold) and
    their label tops zeros (class 0, what a fresh Caffe blob holds)."""
    model = imported.model
    if any(layer.type in producing_types() for layer in imported.net.layer):
        pipe = net_pipeline(imported.net, phase, net_source=imported.source,
                            data_format=data_format)
        iterator = iter(pipe.dataset().repeat())
        return next(iterator), lambda: next(iterator)
    rng = np.random.default_rng(0)
    batch = {}
    for top, tensor in zip(model.caffe_inputs, model.inputs):
        shape = tuple(1 if d is None else d for d in tensor.shape)
        batch[top] = tf.constant(rng.standard_normal(shape).astype("float32"))
    size = next(iter(batch.values())).shape[0] if batch else 1
    spec = getattr(model, "caffe_training", None)
    for top in (set(spec.labels.values()) if spec else ()):
        blob = imported.blobs.get(top)
        if top not in batch and blob is not None and blob.tensor is not None:
            shape = (size, *(1 if d is None else d for d in blob.tensor.shape[1:]))
            batch[top] = tf.zeros(shape, "float32")
    return batch, None


def _steps(imported, batch, reader, training, jit):
    """A ``_Step`` per Caffe layer, in the net's order (Keras layers the
    importer added without a Caffe layer of their own after the one they
    follow)."""
    model = imported.model
    groups, extra = _keras_groups(imported)
    activation = _activations(model, batch, training)
    outputs = _loss_outputs(imported, batch, training)
    rng = np.random.default_rng(1)
    net_inputs = frozenset(id(t) for t in model.inputs)
    steps, first_data = [], None
    for layer in imported.net.layer:
        if layer_types.unit(layer.type).data_layer:
            if reader is None:
                steps.append(_Step(layer.name, layer.type, note="an input: nothing to do"))
            elif first_data is None:
                first_data = layer.name
                steps.append(_Step(layer.name, layer.type, forward=reader,
                                   note="reads the next batch"))
            else:
                steps.append(_Step(layer.name, layer.type, note=f"read with {first_data}"))
        elif layer.name in outputs:
            steps.append(_loss_step(layer, outputs[layer.name], jit))
        elif groups.get(layer.name):
            keras_layers = groups[layer.name]
            pairs = [_layer_functions(k, activation, training, jit, rng, net_inputs)
                     for k in keras_layers]
            steps.append(_Step(layer.name, layer.type, forward=_chain([f for f, _ in pairs]),
                               backward=_chain([b for _, b in pairs[::-1]])))
        else:
            steps.append(_Step(layer.name, layer.type, note=_why_empty(layer, model)))
        for k in extra.get(layer.name, ()):
            forward, backward = _layer_functions(k, activation, training, jit, rng, net_inputs)
            steps.append(_Step(k.name, type(k).__name__, forward, backward,
                               note=f"added by the importer after {layer.name}"))
    return steps


def _keras_groups(imported):
    """``({Caffe layer name: [Keras layers]}, {Caffe layer name: [Keras
    layers added after it]})``, by ``caffe_name`` or the Keras name the
    importer derived from the Caffe name ('/' as '_', a suffix after '_')."""
    names = [layer.name for layer in imported.net.layer]
    by_keras = {name.replace("/", "_"): name for name in names}
    groups, extra, last = {}, {}, names[0] if names else ""
    for layer in imported.model.layers:
        if isinstance(layer, keras.layers.InputLayer):
            continue
        owner = _owner(layer, names, by_keras)
        if owner is None:
            extra.setdefault(last, []).append(layer)
        else:
            groups.setdefault(owner, []).append(layer)
            last = owner
    return groups, extra


def _owner(layer, names, by_keras):
    name = getattr(layer, "caffe_name", None)
    if name in names:
        return name
    if layer.name in by_keras:
        return by_keras[layer.name]
    prefixes = [k for k in by_keras if layer.name.startswith(k + "_")]
    return by_keras[max(prefixes, key=len)] if prefixes else None


def _why_empty(layer, model):
    part = caffe_parts(model).get(layer.name)
    if part is not None:
        return f"computed in {getattr(part[0], 'caffe_name', part[0].name)}"
    return "no computation of its own"


def _activations(model, batch, training):
    """``{id(symbolic tensor): value}`` of every Keras layer's inputs for ``batch``."""
    tensors = []
    for layer in model.layers:
        if isinstance(layer, keras.layers.InputLayer):
            continue
        for t in tf.nest.flatten(layer.input):
            if all(t is not u for u in tensors):
                tensors.append(t)
    x = [batch[top] for top in model.caffe_inputs]
    values = keras.Model(model.inputs, tensors)(x if len(x) > 1 else x[0], training=training)
    values = values if isinstance(values, (list, tuple)) else [values]
    return {id(t): v for t, v in zip(tensors, values)}


def _layer_functions(layer, activation, training, jit, rng, net_inputs=frozenset()):
    """``(forward, backward)`` of one Keras layer on its real inputs. The
    backward skips the gradient to the net's inputs (``net_inputs``: ids of
    the data tensors), as Caffe's ``bottom_need_backward`` does."""
    inputs = tf.nest.map_structure(lambda t: activation[id(t)], layer.input)
    wanted = [t.dtype.is_floating and id(s) not in net_inputs
              for t, s in zip(tf.nest.flatten(inputs), tf.nest.flatten(layer.input))]
    weights = list(layer.trainable_weights)

    @tf.function(jit_compile=jit)
    def forward(xs):
        return layer(xs, training=training)

    out = forward(inputs)
    upstream = [tf.constant(rng.standard_normal(t.shape).astype(t.dtype.name))
                if t.dtype.is_floating else None for t in tf.nest.flatten(out)]

    @tf.function(jit_compile=jit)
    def backward(xs):
        sources = [t for t, w in zip(tf.nest.flatten(xs), wanted) if w]
        with tf.GradientTape() as tape:
            tape.watch(sources)
            y = layer(xs, training=training)
        pairs = [(a, b) for a, b in zip(tf.nest.flatten(y), upstream) if b is not None]
        grads = tape.gradient([a for a, _ in pairs], sources + weights,
                              output_gradients=[b for _, b in pairs])
        return [g for g in grads if g is not None]

    has_upstream = any(u is not None for u in upstream)
    return (lambda: forward(inputs)), ((lambda: backward(inputs))
                                       if (any(wanted) or weights) and has_upstream else None)


def _chain(functions):
    functions = [f for f in functions if f is not None]
    if not functions:
        return None
    if len(functions) == 1:
        return functions[0]

    def run():
        for f in functions:
            f()
    return run


def _loss_outputs(imported, batch, training):
    """``{Caffe layer name: (NetOutput, prediction value, label value)}`` of
    the loss and Accuracy layers."""
    model = imported.model
    spec = getattr(model, "caffe_training", None)
    if not spec or not getattr(spec, "outputs", None):
        return {}
    outputs = NetOutputs(model)
    preds = outputs.predictions(outputs.inputs_of(batch), training)
    by_top = {e.top: e for e in spec.outputs}
    found = {}
    for layer in imported.net.layer:
        entry = by_top.get(layer.top[0] if layer.top else layer.name)
        if entry is not None and layer.name not in found:
            found[layer.name] = (entry, preds[entry.prediction], batch[entry.label])
    return found


def _loss_step(layer, found, jit):
    entry, pred, label = found
    if not entry.is_loss:
        @tf.function
        def metric(p, y):
            entry.fn.reset_state()
            entry.fn.update_state(y, p)
            return entry.fn.result()

        return _Step(layer.name, layer.type, forward=lambda: metric(pred, label))

    @tf.function(jit_compile=jit)
    def forward(p, y):
        return entry.fn(y, p)

    @tf.function(jit_compile=jit)
    def backward(p, y):
        with tf.GradientTape() as tape:
            tape.watch(p)
            value = entry.fn(y, p) * entry.weight
        return tape.gradient(value, p)

    return _Step(layer.name, layer.type, forward=lambda: forward(pred, label),
                 backward=lambda: backward(pred, label))


def _compiled_step(model, batch, training, jit, iterations, sync):
    """``(initial loss, forward ms, forward-backward ms)`` of the whole net as
    one compiled function (forward with its losses; gradients of every
    weight, no update), averages over ``iterations``."""
    outputs = NetOutputs(model) if getattr(model, "caffe_training", None) else None

    @tf.function(jit_compile=jit)
    def forward(b):
        if outputs is not None:
            return outputs(b, training=training)[0]
        x = [b[top] for top in model.caffe_inputs]
        return tf.add_n([tf.reduce_sum(tf.cast(t, "float32")) for t in tf.nest.flatten(
            model(x if len(x) > 1 else x[0], training=training))])

    variables = model.trainable_variables

    @tf.function(jit_compile=jit)
    def forward_backward(b):
        with tf.GradientTape() as tape:
            loss = forward(b)
        return loss, [g for g in tape.gradient(loss, variables) if g is not None]

    initial_loss = float(forward(batch))
    forward_backward(batch)
    return initial_loss, _mean_ms(forward, batch, iterations, sync), \
        _mean_ms(forward_backward, batch, iterations, sync)


def _mean_ms(fn, batch, iterations, sync):
    start = time.perf_counter()
    for _ in range(iterations):
        fn(batch)
    sync()
    return (time.perf_counter() - start) * 1e3 / iterations


def print_timing(report, style="table", stream=None):
    """Print a report as a table (``style="table"``) or as ``caffe time``'s
    log lines (``"caffe"``, on stderr by default)."""
    if style == "caffe":
        _print_caffe_log(report, stream)
        return
    print_grid(timing_grid(report), file=stream)


def timing_grid(report):
    """The report's table: a row per Caffe layer, the remainder, the measured passes."""
    grid = Grid(f"{report.net_name}: average of {report.iterations} iterations, "
                f"{report.device}, XLA {'on' if report.jit else 'off'}",
                [Column("layer"), Column("type"), Column("forward ms", True),
                 Column("backward ms", True), Column("note")])
    for row in report.layers:
        grid.add_row(row.name, row.type, _ms(row.forward_ms), _ms(row.backward_ms), row.note)
    forward, backward = report.remainder
    grid.add_row(REMAINDER, "", _ms(forward), _ms(backward), "Python between the calls",
                 rule=True)
    grid.add_row("forward / backward pass", "", _ms(report.forward_ms), _ms(report.backward_ms),
                 "measured: the rows above add up to it", rule=True, bold=True)
    grid.add_row("forward-backward", "", _ms(report.forward_backward_ms), "",
                 "measured, per iteration")
    grid.add_row("total time", "", _ms(report.total_ms), "",
                 f"measured, {report.iterations} iterations")
    grid.add_row("one compiled step", "", _ms(report.compiled_forward_ms),
                 _ms(report.compiled_forward_backward_ms - report.compiled_forward_ms),
                 "the net as one function, as training runs it", rule=True)
    return grid


def _ms(value):
    return f"{value:.3f}"


def _print_caffe_log(report, stream):
    log = CaffeLog(stream)
    log.line("caffe.cpp:356", f"Initial loss: {number(report.initial_loss)}")
    log.line("caffe.cpp:366", f"Testing for {report.iterations} iterations.")
    log.line("caffe.cpp:397", "Average time per layer: ")
    for row in report.layers:
        log.line("caffe.cpp:400", f"{row.name:>10}\tforward: {number(row.forward_ms)} ms.")
        log.line("caffe.cpp:403", f"{row.name:>10}\tbackward: {number(row.backward_ms)} ms.")
    log.line("caffe.cpp:408", f"Average Forward pass: {number(report.forward_ms)} ms.")
    log.line("caffe.cpp:410", f"Average Backward pass: {number(report.backward_ms)} ms.")
    log.line("caffe.cpp:412",
             f"Average Forward-Backward: {number(report.forward_backward_ms)} ms.")
    log.line("caffe.cpp:414", f"Total Time: {number(report.total_ms)} ms.")
    log.line("caffe.cpp:415", "*** Benchmark ends ***")
