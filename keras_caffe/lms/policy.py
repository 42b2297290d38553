"""Large Model Support: train nets whose activations do not fit in device memory.

Caffe's LMS fork keeps every blob larger than ``-lms N`` KB in host memory
until a layer needs it, and ``-lms_frac F`` switches that on only when the
net is predicted to use more than F of the GPU's memory. ``LMS`` gives Keras
models the same two knobs::

    model = keras_caffe.import_model("deploy.prototxt", lms=keras_caffe.LMS(1000, frac=0.4))
    with keras_caffe.LMS(threshold_kb=1000):      # any functional/Sequential model built inside
        model = build_my_model()
    keras_caffe.LMS(1000).apply(model)             # a model built elsewhere

What happens (see ``lms_graph`` and ``lms_exec`` for the mechanisms):

1. The hard limit: the largest single layer (its inputs, outputs, weights
   and their gradients, ``2 (in + out + w)`` bytes) must fit under the
   memory limit (``memory_limit``, else the device's memory: the GPU's, or
   on CPU the smallest of RAM, the cgroup limit and RLIMIT_DATA/RLIMIT_AS).
   If it does not, ``LayerError`` names the layer before training starts.
2. ``frac``: the predicted peak activation memory is |D|, every layer's
   outputs for the batch, counted as ``keras-caffe analyze`` counts it (for an
   imported Caffe net, by ``analyze`` itself; for other models from the
   layers' output shapes). LMS switches on when ``|D| > frac x memory``
   (``frac=0``: always). The decision and its reasons go to the
   ``keras_caffe.lms`` logger (INFO), one line per model and batch size.
3. Layers whose outputs exceed ``threshold_kb`` KB (1 KB = 1024 bytes) are
   *large*. Runs of large layers are rematerialized in segments (Chen et
   al. 2016), or, on a GPU where copying costs less than recomputing, each
   large layer's inputs are staged in host memory. On a CPU host memory *is*
   the device memory, so staging saves nothing and remat is always chosen.

The numbers do not change: remat recomputes the same operations from the
same values and staging copies them, so loss and gradients equal those
without LMS (tests/lms/test_lms_numbers.py checks 1e-6 relative), whichever way
the model trains: an eager ``tf.GradientTape`` step, a ``tf.function``,
``model.fit`` (traced or ``run_eagerly``) or the ``Solver``
(tests/lms/test_lms_entry_points.py).

Measured findings behind this design (Keras 3.15, TensorFlow 2.21, CPU):
Keras's own ``keras.RematScope(mode="larger_than")`` rematerializes each
large layer on its own; on a chain of Conv and ReLU layers each remat'd
layer keeps its input instead of its output, so the kept memory doubled
(+96% of the activation memory on a 16-layer conv stack). And
``RematScope(mode="full")`` around a sub-model fails inside ``tf.function``
(``tf.custom_gradient`` takes no keyword arguments in graph mode, and a
model's call takes ``training=``). LMS therefore rematerializes whole
segments itself, with ``training`` bound in a closure, through its own
``tf.custom_gradient`` rather than ``keras.remat``, whose backward pass can
read weights that the same step's update has already changed (see
``lms_exec``).
"""

import gc
import weakref

import keras

from keras_caffe._checks import check_number
from keras_caffe.analysis import analyze
from keras_caffe.errors import ArgumentError, KerasCaffeError
from keras_caffe.importers.layer_types._data import source_types
from keras_caffe.importers.net import lms_hook
from keras_caffe.devices import compute_device, device_memory, fmt_bytes, gpu_rates
from keras_caffe.kernels import onednn_enabled
from keras_caffe.lms.execution import (
    LOG,
    Runner,
    install,
    return_freed_blocks,
    uninstall,
)
from keras_caffe.lms.plan import (
    Block,
    check_hard_limit,
    model_graph,
    part_sizes,
    plan,
)

_MECHANISMS = ("auto", "remat", "stage")
#: sub-models LMS builds itself (never planned again)
_OWN = weakref.WeakSet()


class LMS:
    """Large Model Support settings: Caffe's ``-lms N`` and ``-lms_frac F``.

    Args:
        threshold_kb: activations larger than this many KB (1024 bytes, for
            the whole batch) are rematerialized or staged; ``0``: all.
        frac: switch LMS on only when the predicted activation memory |D|
            exceeds ``frac`` x the device's memory; ``0``: always on.
        memory_limit: bytes to plan against instead of the device's memory
            (for ``frac`` and the hard limit).
        batch: the batch size to plan for when the model does not declare
            one; by default it is read from the first call's inputs.
        mechanism: ``"auto"`` (remat on CPU and under XLA; on a GPU, per run
            of large layers, whichever of staging and remat is modelled
            cheaper from the measured host-link bandwidth and matmul speed),
            or force ``"remat"`` / ``"stage"``.
        batch_parts: on Eigen's CPU kernels (TensorFlow without oneDNN), run
            each rematerialized segment of per-sample layers over parts of
            the batch, so that a (recomputed) convolution holds the im2col
            matrix of a part, at most two activations, instead of the whole
            batch's (Caffe's own convolution holds one image's); see
            ``lms_graph.Graph.chunks``. Less memory for more time, and the
            parts' weight gradients are summed part by part, so the numbers
            differ from the step without LMS in float32 rounding (not
            bit-identical). Nothing changes elsewhere (oneDNN, GPUs).
    """

    def __init__(self, threshold_kb, frac=0.0, *, memory_limit=None, batch=None,
                 mechanism="auto", batch_parts=False):
        self.threshold_kb = check_number("LMS", "threshold_kb", threshold_kb, low=0.0)
        self.frac = check_number("LMS", "frac", frac, low=0.0, high=1.0)
        if memory_limit is not None:
            memory_limit = int(check_number("LMS", "memory_limit", memory_limit, low=0.0,
                                            low_open=True))
        self.memory_limit = memory_limit
        if batch is not None:
            batch = int(check_number("LMS", "batch", batch, low=1.0))
        self.batch = batch
        if mechanism not in _MECHANISMS:
            raise ArgumentError("LMS", "mechanism", f"must be one of {_MECHANISMS}, "
                                                    f"got {mechanism!r}")
        self.mechanism = mechanism
        if not isinstance(batch_parts, bool):
            raise ArgumentError("LMS", "batch_parts", f"must be True or False, got "
                                                      f"{batch_parts!r}")
        self.batch_parts = batch_parts
        self._before = None

    @property
    def threshold_bytes(self):
        return self.threshold_kb * 1024

    def __repr__(self):
        return f"LMS(threshold_kb={self.threshold_kb:g}, frac={self.frac:g})"

    # -- applying ------------------------------------------------------------------------

    def apply(self, model, *, caffe_net=None, jit_compile=False):
        """Train ``model`` with LMS from now on; returns ``model``.

        The model keeps its layers, weights and config (saving is
        unchanged and saves no LMS); only its call runs through the plan.
        The plan is made now if the batch is known (``batch``, or the model
        declares it), else at the first call, before the first step runs;
        the hard limit is checked then. ``caffe_net`` (set by
        ``import_model``) lets the prediction use ``keras-caffe analyze``.
        ``jit_compile``: the train step is XLA-compiled (staging is then
        never chosen). Raises ``ArgumentError`` for a model without a
        functional graph, ``LayerError`` for a layer over the hard limit.
        """
        graph = model_graph(model, eigen=compute_device() == "CPU" and not onednn_enabled())
        planner = Planner(self, graph, caffe_net, jit_compile)
        batch = self.batch or graph.batch() or planner.caffe_batch()
        if batch is not None:
            planner(batch)
        install(model, planner)
        model.caffe_lms = planner
        return model

    def attach_to(self, imported, *, phase="TEST", level=0, stages=(),
                  data_format="channels_last", jit_compile=False):
        """``apply`` for an ``ImportedNet`` (what ``import_net`` returns), the
        prediction from ``keras-caffe analyze`` of its net: what
        ``import_model(lms=...)`` calls (``keras_caffe.importers.net.lms_hook``).
        Returns the model."""
        return attach(imported, self, phase=phase, level=level, stages=stages,
                      data_format=data_format, jit_compile=jit_compile)

    @staticmethod
    def remove(model):
        """Train ``model`` without LMS again."""
        uninstall(model)
        if "caffe_lms" in vars(model):
            del model.caffe_lms

    # -- the context manager -------------------------------------------------------------

    def __enter__(self):
        stack = _stack()
        stack.append(self)
        self._before = weakref.WeakSet(_models())
        return self

    def __exit__(self, exc_type, *exc):
        stack = _stack()
        if stack and stack[-1] is self:
            stack.pop()
        before, self._before = self._before, None
        if exc_type is not None:
            return False
        for model in _new_models(before):
            try:
                self.apply(model)
            except ArgumentError as err:
                LOG.warning("LMS not applied to %r: %s", model.name, err)
        return False


def _parts(graph, remat, batch):
    """The log's note on remat blocks run over parts of the batch ('' if none)."""
    parted = [b for b in remat if b.chunks > 1]
    if not parted:
        return ""
    held = max(graph.workspace(n, batch) * part_sizes(batch, b.chunks)[0] / batch
               for b in parted for n in b.nodes)
    most = max(b.chunks for b in parted)
    return (f"; {len(parted)} rematerialized segment(s) run in up to {most} parts of the batch, "
            f"so a recomputed convolution holds at most {fmt_bytes(held)}")


def current():
    """The innermost active ``with LMS(...)`` block's settings, or None."""
    stack = _stack()
    return stack[-1] if stack else None


def from_cli(lms_kb, lms_frac=None, lms_parts=False):
    """``keras-caffe train --lms N --lms-frac F [--lms-parts]`` -> an ``LMS`` or None.

    ``--lms-frac`` or ``--lms-parts`` without ``--lms`` is refused, as are a
    negative N and an F outside [0, 1] (``ArgumentError`` naming the flag).
    """
    if lms_kb is None:
        for flag, given in (("--lms-frac", lms_frac is not None), ("--lms-parts", lms_parts)):
            if given:
                raise ArgumentError("keras-caffe train", flag,
                                    "needs --lms N (the threshold in KB)")
        return None
    try:
        return LMS(threshold_kb=lms_kb, frac=0.0 if lms_frac is None else lms_frac,
                   batch_parts=bool(lms_parts))
    except ArgumentError as err:
        flag = {"threshold_kb": "--lms", "frac": "--lms-frac"}[err.argument]
        raise ArgumentError("keras-caffe train", flag,
                            str(err).split("` ", 1)[1]) from None


def _stack():
    # Kept where import_model reads it (the importers never import LMS).
    return lms_hook.active()


def _models():
    return [o for o in gc.get_objects() if isinstance(o, keras.Model)]


def _new_models(before):
    """Top-level models created since ``before``: not LMS's own, not already
    planned, not used as a layer of another new model, one per set of layers
    (a Sequential and the functional model it builds inside)."""
    new = [m for m in _models() if m not in before and m not in _OWN
           and "caffe_lms" not in vars(m)]
    nested = {id(layer) for m in new for layer in m.layers if isinstance(layer, keras.Model)}
    chosen, seen = [], set()
    for m in sorted(new, key=lambda m: type(m).__name__ == "Functional"):
        key = frozenset(id(layer) for layer in m.layers
                        if not isinstance(layer, keras.layers.InputLayer))
        if id(m) in nested or key in seen or not key:
            continue
        seen.add(key)
        chosen.append(m)
    return chosen


class Planner:
    """Plans (lists of ``Runner``) of one model, one per batch size; the
    first plan for a batch size logs the decision."""

    def __init__(self, lms, graph, caffe_net, jit_compile):
        self.lms, self.graph, self.caffe_net, self.jit_compile = lms, graph, caffe_net, jit_compile
        self.plans, self.blocks, self._last = {}, {}, None

    def __call__(self, batch):
        if batch is None:
            batch = self._last or self.lms.batch or self.graph.batch() or self.caffe_batch()
            if batch is None:
                raise ArgumentError("LMS", "batch", f"model {self.graph.model.name!r}: the "
                                    "batch size is unknown (the model and its inputs do not "
                                    "say it); give LMS(..., batch=N)")
        if batch not in self.plans:
            self.blocks[batch] = blocks = self._make(batch)
            runners = [Runner(b) for b in blocks if b.outputs]
            _OWN.update(r.model for r in runners)
            self.plans[batch] = runners
        self._last = batch
        return self.plans[batch]

    # -- deciding -------------------------------------------------------------------------

    def _make(self, batch):
        lms, graph = self.lms, self.graph
        limit, where = ((lms.memory_limit, "memory_limit") if lms.memory_limit is not None
                        else device_memory())
        check_hard_limit(graph, batch, limit, where)
        predicted, how = self.predict(batch)
        name = graph.model.name
        head = f"LMS for model {name!r} (batch {batch})"
        budget = None if limit is None else lms.frac * limit
        if lms.frac > 0 and budget is not None and predicted <= budget:
            LOG.info("%s: off: predicted activations |D| %s (%s) <= frac %g x %s (%s) = %s",
                     head, fmt_bytes(predicted), how, lms.frac, fmt_bytes(limit), where,
                     fmt_bytes(budget))
            return [Block("plain", list(graph.nodes), graph.inputs, graph.outputs)]
        self._reasons = set()
        blocks = plan(graph, batch, lms.threshold_bytes, self._choose, parts=lms.batch_parts)
        if lms.frac == 0:
            why = "frac 0: always on"
        elif budget is None:
            why = f"{where}, so on"
        else:
            why = f"exceeds frac {lms.frac:g} x {fmt_bytes(limit)} ({where}) = {fmt_bytes(budget)}"
        remat = [b for b in blocks if b.kind == "remat"]
        stage = [b for b in blocks if b.kind == "stage"]
        large = sum(1 for n in graph.nodes
                    if graph.out_bytes(n, batch) > lms.threshold_bytes)
        node, need = graph.largest_layer(batch)
        LOG.info("%s: on: predicted activations |D| %s (%s); %s; %d of %d layers over %g KB: "
                 "%d rematerialized in %d segment(s) (%s), %d staged in host memory; "
                 "largest layer %r needs %s", head, fmt_bytes(predicted), how, why, large,
                 len(graph.nodes), lms.threshold_kb, sum(len(b.nodes) for b in remat),
                 len(remat), fmt_bytes(sum(b.bytes for b in remat)), len(stage),
                 node.name, fmt_bytes(need))
        for reason in sorted(self._reasons):
            LOG.info("%s: mechanism: %s", head, reason)
        if compute_device() == "CPU":
            freed = return_freed_blocks(lms.threshold_bytes)
            if freed is not None:
                LOG.info("%s: allocator: freed blocks of %s or more go back to the system at "
                         "once (glibc M_MMAP_THRESHOLD), so freed activations are free",
                         head, fmt_bytes(freed))
        if graph.eigen:
            LOG.info("%s: kernels: Eigen (TensorFlow without oneDNN): the largest "
                     "convolution workspace is %s%s", head,
                     fmt_bytes(max(graph.workspace(n, batch) for n in graph.nodes)),
                     _parts(graph, remat, batch))
        for b in blocks:
            if b.kind != "plain":
                LOG.debug("%s: %s %s (%d layers, %s)", head, b.kind, b.names, len(b.nodes),
                          fmt_bytes(b.bytes))
        return blocks

    def _choose(self, nodes, batch):
        """The mechanism of one run of large layers (see ``LMS``)."""
        mechanism = self.lms.mechanism
        if mechanism != "auto":
            self._reasons.add(f"{mechanism} (forced by mechanism={mechanism!r})")
            return mechanism
        if compute_device() == "CPU":
            self._reasons.add("remat everywhere: on a CPU host memory is the device memory, "
                              "so staging would save nothing")
            return "remat"
        if self.jit_compile:
            self._reasons.add("remat everywhere: XLA ignores device placement, so staging "
                              "cannot move tensors to the host")
            return "remat"
        link, macs = gpu_rates()
        graph = self.graph
        stage = sum(2 * graph.in_bytes(n, batch) for n in nodes) / link
        values = sum(graph.out_bytes(n, batch) // 4 * n.macs_per_output for n in nodes)
        remat = values / macs
        choice = "stage" if stage < remat else "remat"
        self._reasons.add(f"{nodes[0].name}..{nodes[-1].name}: {choice} (modelled: staging "
                          f"{stage * 1e3:.2f} ms over {link / 1e9:.1f} GB/s, recomputing "
                          f"{remat * 1e3:.2f} ms at {macs / 1e12:.1f} TMAC/s)")
        return choice

    # -- predicting -----------------------------------------------------------------------

    def predict(self, batch):
        """``(|D| bytes, how it was counted)`` for a batch size."""
        if self.caffe_net is not None:
            try:
                report = self._analyze(batch)
                return report.activation_bytes, "keras-caffe analyze of the Caffe net"
            except KerasCaffeError as err:
                LOG.debug("LMS: analyze could not count the Caffe net (%s); counting the "
                          "Keras layers' output shapes", err)
        return self.graph.activation_bytes(batch), "the layers' output shapes"

    def caffe_batch(self):
        """The batch the Caffe net states: a data layer's ``batch_size``, or
        the first axis of an Input/DummyData shape; None if it states none."""
        if self.caffe_net is None:
            return None
        for layer in self.caffe_net["param"].layer:
            for field in ("data_param", "image_data_param", "hdf5_data_param",
                          "memory_data_param", "window_data_param"):
                if layer.HasField(field) and getattr(layer, field).batch_size > 0:
                    return int(getattr(layer, field).batch_size)
        try:
            return self._analyze(None).batch
        except KerasCaffeError:
            return None

    def _analyze(self, batch):
        net = self.caffe_net
        return analyze(net["param"], batch=batch, phase=net["phase"], level=net["level"],
                       stages=net["stages"], input_shapes=net["input_shapes"] or None)


def attach(imported, lms, *, phase="TEST", level=0, stages=(), data_format="channels_last",
           jit_compile=False):
    """``lms.apply`` for an ``ImportedNet`` (what ``import_net`` returns):
    the prediction is ``keras-caffe analyze``'s |D| of the net. Returns the model."""
    info = caffe_net_info(imported, phase.upper() if isinstance(phase, str) else phase, level,
                          stages, data_format)
    return lms.apply(imported.model, caffe_net=info, jit_compile=jit_compile)


def caffe_net_info(imported, phase, level, stages, data_format):
    """What ``Planner`` needs to run ``analyze`` on an imported net: the
    filtered ``NetParameter`` and the shapes of data tops that the prototxt
    does not state (read from the imported model's inputs; other tops, such
    as labels, count one value per sample)."""
    source_data_types = source_types()
    inputs = {t.name: tuple(t.shape[1:]) for t in keras.tree.flatten(imported.model.inputs)}
    shapes = {}
    for layer in imported.net.layer:
        if layer.type not in source_data_types:
            continue
        for top in layer.top:
            shape = inputs.get(top, ())
            if data_format == "channels_last" and len(shape) >= 2:
                shape = (shape[-1], *shape[:-1])
            shapes[top] = tuple(int(d) for d in shape if d is not None)
    return {"param": imported.net, "phase": phase, "level": level, "stages": tuple(stages),
            "input_shapes": shapes}
