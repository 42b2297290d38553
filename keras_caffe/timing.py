"""``keras-caffe time``: forward and backward time per layer, as ``caffe time``.

Caffe's ``time`` command builds the net (TRAIN phase by default), runs one
forward and backward pass, then ``iterations`` timed passes, and prints the
average forward and backward time of every layer and of the whole net.
Here every Keras layer of the imported model is timed on its own: its
inputs are the real activations of one batch, ``forward`` is the layer's
call (a ``tf.function``, XLA with ``jit_compile``), ``backward`` the extra
time of the call with its gradients (to its inputs and weights, for a
random upstream gradient) over the call alone. The totals time the whole
net (forward with its loss layers; forward-backward with the gradients of
every weight, no update), which is what one training iteration costs less
the update: the per-layer times do not add up to it exactly, as Caffe's
do not, since a whole-net function skips per-layer dispatch.
"""

import statistics
import time

import keras
import numpy as np
import tensorflow as tf

from keras_caffe.errors import KerasCaffeError


class LayerTime:
    def __init__(self, name, forward_ms, backward_ms):
        self.name, self.forward_ms, self.backward_ms = name, forward_ms, backward_ms


class TimingReport:
    """Per-layer and whole-net times in milliseconds (medians over iterations)."""

    def __init__(self, net_name, iterations, layers, forward_ms, forward_backward_ms,
                 initial_loss, device, jit):
        self.net_name, self.iterations, self.layers = net_name, iterations, layers
        self.forward_ms, self.forward_backward_ms = forward_ms, forward_backward_ms
        self.backward_ms = max(forward_backward_ms - forward_ms, 0.0)
        self.initial_loss, self.device, self.jit = initial_loss, device, jit

    def to_dict(self):
        return {"net": self.net_name, "iterations": self.iterations, "device": self.device,
                "jit": self.jit, "initial_loss": self.initial_loss,
                "forward_ms": self.forward_ms, "backward_ms": self.backward_ms,
                "forward_backward_ms": self.forward_backward_ms,
                "layers": [{"name": t.name, "forward_ms": t.forward_ms,
                            "backward_ms": t.backward_ms} for t in self.layers]}


def _median_ms(fn, args, iterations):
    result = fn(*args)  # trace, compile, warm up
    tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, result)
    times = []
    for _ in range(iterations):
        start = time.perf_counter()
        result = fn(*args)
        tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, result)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _first_batch(imported, phase, data_format):
    """One batch for the net: from its data layers' pipelines, or random
    normal values for plain Input layers (as ``caffe time`` runs on whatever
    its input blobs hold)."""
    from keras_caffe.importers.layer_types._data import producing_types

    model = imported.model
    data_layer_types = producing_types()
    if any(layer.type in data_layer_types for layer in imported.net.layer):
        from keras_caffe.importers.pipelines import net_pipeline

        pipe = net_pipeline(imported.net, phase, net_source=imported.source,
                            data_format=data_format)
        return next(iter(pipe.dataset()))
    rng = np.random.default_rng(0)
    batch = {}
    for top, tensor in zip(model.caffe_inputs, model.inputs):
        shape = tuple(1 if d is None else d for d in tensor.shape)
        batch[top] = tf.constant(rng.standard_normal(shape).astype("float32"))
    # Label tops of Input layers are targets, not model inputs: zeros (class
    # 0), what a fresh Caffe input blob holds.
    size = next(iter(batch.values())).shape[0] if batch else 1
    spec = getattr(model, "caffe_training", None)
    for top in (set(spec.labels.values()) if spec else ()):
        blob = imported.blobs.get(top)
        if top not in batch and blob is not None and blob.tensor is not None:
            shape = (size, *(1 if d is None else d for d in blob.tensor.shape[1:]))
            batch[top] = tf.zeros(shape, "float32")
    return batch


def time_net(net, *, iterations=50, phase="TRAIN", data_format="channels_last",
             jit_compile="auto"):
    """Time ``net`` (a prototxt path, its text or a NetParameter); returns a
    ``TimingReport``."""
    from keras_caffe.importers.api import import_net
    from keras_caffe.net_step import NetOutputs, resolve_jit

    if iterations < 1:
        raise KerasCaffeError(f"time: iterations must be >= 1, got {iterations}")
    jit = resolve_jit(jit_compile)
    imported = import_net(net, phase=phase, data_format=data_format)
    model = imported.model
    batch = _first_batch(imported, phase, data_format)
    training = phase == "TRAIN"
    x = [batch[top] for top in model.caffe_inputs]
    layers = [layer for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]

    # The activations every layer reads, from one forward pass.
    tensors = []
    for layer in layers:
        for t in tf.nest.flatten(layer.input):
            if all(t is not u for u in tensors):
                tensors.append(t)
    probe = keras.Model(model.inputs, tensors)
    values = probe(x if len(x) > 1 else x[0], training=training)
    values = values if isinstance(values, (list, tuple)) else [values]
    activation = {id(t): v for t, v in zip(tensors, values)}

    rng = np.random.default_rng(1)
    rows = []
    for layer in layers:
        inputs = tf.nest.map_structure(lambda t: activation[id(t)], layer.input)
        rows.append(_time_layer(layer, inputs, training, jit, iterations, rng))

    outputs = NetOutputs(model) if getattr(model, "caffe_training", None) else None

    @tf.function(jit_compile=jit)
    def forward(b):
        if outputs is not None:
            return outputs(b, training=training)[0]
        return tf.add_n([tf.reduce_sum(t) for t in tf.nest.flatten(
            model([b[top] for top in model.caffe_inputs] if len(model.caffe_inputs) > 1
                  else b[model.caffe_inputs[0]], training=training))])

    variables = model.trainable_variables

    @tf.function(jit_compile=jit)
    def forward_backward(b):
        with tf.GradientTape() as tape:
            loss = forward(b)
        grads = tape.gradient(loss, variables)
        return loss, [g for g in grads if g is not None]

    initial_loss = float(forward(batch))
    fwd = _median_ms(forward, (batch,), iterations)
    fwd_bwd = _median_ms(forward_backward, (batch,), iterations)
    device = (tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU"))[0].name
    return TimingReport(model.name, iterations, rows, fwd, fwd_bwd, initial_loss, device, jit)


def _time_layer(layer, inputs, training, jit, iterations, rng):
    weights = layer.trainable_weights

    @tf.function(jit_compile=jit)
    def forward(xs):
        return layer(xs, training=training)

    out = forward(inputs)
    upstream = tf.nest.map_structure(
        lambda t: tf.constant(rng.standard_normal(t.shape).astype(t.dtype.name))
        if t.dtype.is_floating else None, out)
    sources = [t for t in tf.nest.flatten(inputs) if t.dtype.is_floating]

    @tf.function(jit_compile=jit)
    def forward_backward(xs):
        with tf.GradientTape() as tape:
            tape.watch(sources)
            y = layer(xs, training=training)
        pairs = [(a, b) for a, b in zip(tf.nest.flatten(y), tf.nest.flatten(upstream))
                 if b is not None]
        if not pairs or not (sources or weights):
            return tf.nest.flatten(y)
        grads = tape.gradient([a for a, _ in pairs], sources + list(weights),
                              output_gradients=[b for _, b in pairs])
        return [g for g in grads if g is not None] or tf.nest.flatten(y)

    name = getattr(layer, "caffe_name", layer.name)
    fwd = _median_ms(forward, (inputs,), iterations)
    fwd_bwd = _median_ms(forward_backward, (inputs,), iterations)
    return LayerTime(name, fwd, max(fwd_bwd - fwd, 0.0))


def print_timing(report, style="table", stream=None):
    """Print a report as a rich table, or as ``caffe time``'s log lines."""
    if style == "caffe":
        from keras_caffe.caffe_log import CaffeLog, number

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
        log.line("caffe.cpp:414", "Total Time: "
                                  f"{number(report.forward_backward_ms * report.iterations)} ms.")
        log.line("caffe.cpp:415", "*** Benchmark ends ***")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{report.net_name}: median of {report.iterations} iterations, "
                        f"{report.device}, XLA {'on' if report.jit else 'off'}")
    for column in ("layer", "forward ms", "backward ms"):
        table.add_column(column, justify="left" if column == "layer" else "right")
    for row in report.layers:
        table.add_row(row.name, f"{row.forward_ms:.3f}", f"{row.backward_ms:.3f}")
    table.add_section()
    table.add_row("whole net", f"{report.forward_ms:.3f}", f"{report.backward_ms:.3f}")
    table.add_row("forward-backward", f"{report.forward_backward_ms:.3f}", "")
    Console(file=stream).print(table)
