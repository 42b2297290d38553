"""The activation graph of a Keras functional model, and the LMS plan over it.

``model_graph(model)`` reads the graph through public Keras API only
(``model.layers``, ``layer.input`` / ``layer.output``, ``model.inputs`` /
``model.outputs``) and orders it topologically. Sizes follow
``keras-caffe analyze``'s |D| accounting (FireCaffe's: every layer's outputs
for the whole batch, the data layer's too), computed from the layers' output
shapes with the batch filled in.

``plan(graph, ...)`` cuts the layers into blocks that run one after another:

- ``plain`` blocks run as usual (their activations stay resident until the
  backward pass needs them);
- ``remat`` blocks are rematerialized (``lms_exec``): only the block's
  inputs are kept; its interior is recomputed on the backward pass
  (Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost",
  arXiv:1604.06174, section 4.1: segments of about sqrt(n) layers, so the
  kept memory is O(sqrt(n)) activations instead of O(n));
- ``stage`` blocks (one layer each) keep their inputs in host memory between
  the forward and the backward pass, and copy them back when the gradient
  arrives (Caffe's LMS fork: a large blob lives on the host).

A layer is *large* when its outputs exceed the threshold (Caffe's
``-lms N``: N KB, 1 KB = 1024 bytes). Only large layers are rematerialized or
staged. A layer with state that its call updates or draws from (non-trainable
variables: BatchNorm's moving statistics, Dropout's seed generator) is never
rematerialized, because recomputing it would update the statistics twice or
draw a different dropout mask; it runs plain. So does a layer whose call
adds a loss (an ``activity_regularizer``, keras-caffe's ``TopLoss``): the
loss would be computed inside the block's gradient boundary, with no
gradient of its own.

Under Eigen's CPU kernels a forward convolution holds the im2col matrix of
the whole batch (``Graph.workspace``: 9 x C_in/C_out times its output for a
3x3 convolution), which a recomputed convolution needs again. With
``LMS(batch_parts=True)`` a ``remat`` block whose layers are all per-sample
(``per_sample``) runs in parts of the batch (``Block.chunks``), so its
convolutions hold the matrix of a part only, as Caffe's own convolution
holds one image's.
"""

import dataclasses
import math

import keras
import numpy as np

from keras_caffe.devices import fmt_bytes
# LayerLimitError: defined in keras_caffe.errors, re-exported here (its former home)
from keras_caffe.errors import ArgumentError, KerasCaffeError, LayerError, LayerLimitError  # noqa: F401
from keras_caffe.layers.conv import Convolution

_SIZES = {"bfloat16": 2, "float16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}


def dtype_bytes(dtype):
    """Bytes of one value of ``dtype`` (a Keras dtype name)."""
    name = keras.backend.standardize_dtype(dtype)
    if name in _SIZES:
        return _SIZES[name]
    return np.dtype(name).itemsize


def tensor_bytes(tensor, batch):
    """Bytes of a symbolic tensor for a batch: unknown first axis = ``batch``,
    other unknown axes count 1."""
    shape = tuple(tensor.shape)
    dims = [batch if (d is None and i == 0) else (d or 1) for i, d in enumerate(shape)]
    return math.prod(dims) * dtype_bytes(tensor.dtype)


@dataclasses.dataclass
class Node:
    """One layer call: ``inputs``/``outputs`` are KerasTensors."""

    layer: object
    inputs: tuple
    outputs: tuple
    #: no non-trainable variables: recomputing it gives the same values and
    #: updates nothing
    pure: bool
    weight_bytes: int
    #: multiply-adds per output value (kernel size / the output channels),
    #: 1 for layers without a kernel: the recompute-cost model
    macs_per_output: int
    #: values of the im2col matrix Eigen's forward convolution packs, per
    #: output value (0: not a convolution Eigen runs as a contraction)
    im2col_per_output: float = 0.0
    #: each sample of its outputs depends on the same sample of its inputs
    #: only (``per_sample``), so it may run over parts of the batch
    per_sample: bool = False

    @property
    def name(self):
        return self.layer.name


@dataclasses.dataclass
class Graph:
    model: object
    inputs: tuple
    outputs: tuple
    nodes: list
    #: the step runs Eigen's CPU kernels (not oneDNN's, not a GPU's), whose
    #: forward convolution holds a temporary im2col matrix (``workspace``)
    eigen: bool = False

    def out_bytes(self, node, batch):
        return sum(tensor_bytes(t, batch) for t in node.outputs)

    def in_bytes(self, node, batch):
        return sum(tensor_bytes(t, batch) for t in node.inputs)

    def activation_bytes(self, batch):
        """|D| as ``keras-caffe analyze`` counts it: every layer's outputs
        plus the data (input) tops, for the whole batch."""
        return (sum(tensor_bytes(t, batch) for t in self.inputs)
                + sum(self.out_bytes(n, batch) for n in self.nodes))

    def workspace(self, node, batch):
        """Temporary bytes of the layer's kernel beyond its inputs and outputs:
        under Eigen, a convolution's packed im2col matrix of the whole batch
        ((N H_out W_out) x (k_h k_w C_in / group) values; measured on TF 2.21:
        a 3x3 convolution of 16 channels with 16 MiB of output held 176 MiB
        at its peak, against 32 MiB under oneDNN). 0 elsewhere."""
        if not self.eigen or not node.im2col_per_output:
            return 0
        return int(self.out_bytes(node, batch) * node.im2col_per_output)

    def layer_need(self, node, batch):
        """What one layer needs resident at once to train: its inputs,
        outputs and weights, and the gradients of each (2 x their sum), plus
        its kernel's workspace."""
        return (2 * (self.in_bytes(node, batch) + self.out_bytes(node, batch) + node.weight_bytes)
                + self.workspace(node, batch))

    def chunks(self, nodes, batch):
        """Parts of the batch a rematerialized block of ``nodes`` runs in:
        under Eigen, ``ceil(largest workspace / (2 x largest activation))``
        of the block, at most the batch, so that a part's convolution
        workspace is at most two activations. 1 when no workspace is larger
        than that, or one of its layers is not per-sample.

        Why two, measured on ``tests/support/lms.py``'s ceiling net (3x3
        convolutions, workspace 9 activations; Eigen, TF 2.21, 2-core AMD
        EPYC): for 1 / 3 / 4 / 5 / 9 parts the step's peak virtual size
        over its start was 350 / 297 / 293 / 279-283 / 305-309 MiB and its
        time 2.8-4.2 / 3.5-4.2 / 3.8-4.9 / 4.4-5.3 / 5.0-5.7 s (single runs,
        alternated). Five parts (this rule's) gave the lowest peak; more
        parts cost time and raised it again."""
        if not self.eigen or not nodes or not all(n.per_sample for n in nodes):
            return 1
        workspace = max(self.workspace(n, batch) for n in nodes)
        largest = max(self.out_bytes(n, batch) for n in nodes)
        if largest <= 0 or workspace <= 2 * largest:
            return 1
        return int(min(batch, math.ceil(workspace / (2 * largest))))

    def largest_layer(self, batch):
        """``(node, bytes)`` of the layer with the largest ``layer_need``."""
        best = max(self.nodes, key=lambda n: self.layer_need(n, batch))
        return best, self.layer_need(best, batch)

    def batch(self):
        """The batch the model declares (its inputs' first axis), or None."""
        for t in self.inputs:
            if len(t.shape) and t.shape[0] is not None:
                return int(t.shape[0])
        return None


def _flat(value):
    return tuple(keras.tree.flatten(value))


def _macs_per_output(layer):
    """Kernel multiply-adds per output value: ``prod(kernel.shape[:-1])``
    (Conv: k_h k_w C_in/group; Dense: C_in), else 1."""
    kernel = getattr(layer, "kernel", None)
    shape = tuple(getattr(kernel, "shape", ()) or ())
    if len(shape) >= 2:
        return max(1, math.prod(shape[:-1]))
    return 1


def _im2col_per_output(layer):
    """im2col values per output value of a convolution that Eigen computes
    as one contraction (Keras's Conv1D/2D/3D and Caffe's non-depthwise
    Convolution): ``k_h k_w C_in/group / C_out``; else 0. Depthwise and
    transposed convolutions have kernels of their own with bounded buffers."""
    if not isinstance(layer, (keras.layers.Conv1D, keras.layers.Conv2D, keras.layers.Conv3D,
                              Convolution)) or getattr(layer, "depthwise", False):
        return 0.0
    shape = tuple(layer.kernel.shape)
    return math.prod(shape[:-1]) / shape[-1]


#: Keras layers whose every output sample depends on the same input sample
#: only (Keras's own: no batch statistics, no state)
_PER_SAMPLE = (
    keras.layers.Conv1D, keras.layers.Conv2D, keras.layers.Conv3D,
    keras.layers.Conv1DTranspose, keras.layers.Conv2DTranspose, keras.layers.Conv3DTranspose,
    keras.layers.DepthwiseConv1D, keras.layers.DepthwiseConv2D,
    keras.layers.SeparableConv1D, keras.layers.SeparableConv2D, keras.layers.Dense,
    keras.layers.Activation, keras.layers.ReLU, keras.layers.LeakyReLU, keras.layers.PReLU,
    keras.layers.ELU, keras.layers.Identity,
    keras.layers.MaxPooling1D, keras.layers.MaxPooling2D, keras.layers.MaxPooling3D,
    keras.layers.AveragePooling1D, keras.layers.AveragePooling2D,
    keras.layers.AveragePooling3D, keras.layers.GlobalMaxPooling1D,
    keras.layers.GlobalMaxPooling2D, keras.layers.GlobalMaxPooling3D,
    keras.layers.GlobalAveragePooling1D, keras.layers.GlobalAveragePooling2D,
    keras.layers.GlobalAveragePooling3D, keras.layers.ZeroPadding1D, keras.layers.ZeroPadding2D,
    keras.layers.ZeroPadding3D, keras.layers.Cropping1D, keras.layers.Cropping2D,
    keras.layers.Cropping3D, keras.layers.UpSampling1D, keras.layers.UpSampling2D,
    keras.layers.UpSampling3D, keras.layers.Flatten, keras.layers.Reshape, keras.layers.Permute,
    keras.layers.Add, keras.layers.Subtract, keras.layers.Multiply, keras.layers.Maximum,
    keras.layers.Minimum, keras.layers.Average,
)
#: per-sample unless their ``axis`` is the batch axis
_PER_SAMPLE_AXIS = (keras.layers.Concatenate, keras.layers.Softmax)


def per_sample(layer):
    """Whether each sample of ``layer``'s outputs depends on the same sample
    of its inputs only, so running it over parts of the batch and joining
    the parts gives its outputs: a layer class that says so
    (``per_sample = True``, as keras-caffe's Convolution, Pooling, LRN,
    Eltwise and single-input element-wise layers do), the Keras layers of
    ``_PER_SAMPLE`` (exactly those classes, not subclasses, which may do
    more), and Concatenate and Softmax along an axis other than the batch's."""
    own = getattr(type(layer), "per_sample", None)
    if own is not None:
        return bool(own)
    if type(layer) in _PER_SAMPLE:
        return True
    if type(layer) in _PER_SAMPLE_AXIS:
        ndim = len(_flat(layer.output)[0].shape)
        axes = layer.axis if isinstance(layer.axis, (list, tuple)) else [layer.axis]
        return all(int(a) % ndim != 0 for a in axes)
    return False


def output_structure(model):
    """The model's outputs as its call returns them (a tensor, list or dict)."""
    try:
        return model.output
    except (AttributeError, ValueError):
        outputs = list(model.outputs)
        return outputs[0] if len(outputs) == 1 else outputs


def adds_loss(layer):
    """Whether ``layer``'s call adds to the model's losses: an activity
    regularizer, or a layer class that says so (``adds_loss = True``)."""
    return getattr(layer, "activity_regularizer", None) is not None or \
        bool(getattr(layer, "adds_loss", False))


def model_graph(model, eigen=False):
    """The layer graph of a built functional (or Sequential) model, in
    topological order; ``eigen``: the step runs Eigen's CPU kernels (see
    ``Graph.workspace``). Raises ``ArgumentError`` for models LMS cannot plan:
    subclassed models (no graph) and layers called more than once."""
    try:
        inputs, outputs = _flat(model.inputs), _flat(output_structure(model))
    except (AttributeError, ValueError, TypeError):
        inputs = outputs = None
    if not inputs or not outputs:
        raise ArgumentError("LMS", "model", f"{model.name!r} has no functional graph (a "
                            "subclassed or unbuilt model); LMS plans functional and Sequential "
                            "models. Wrap the large blocks of a subclassed model with "
                            "keras.remat instead")
    candidates = []
    for layer in model.layers:
        if isinstance(layer, keras.layers.InputLayer):
            continue
        candidates.append(Node(
            layer=layer, inputs=_flat(layer.input), outputs=_flat(layer.output),
            pure=not layer.non_trainable_variables and not adds_loss(layer),
            weight_bytes=sum(math.prod(w.shape) * dtype_bytes(w.dtype) for w in layer.weights),
            macs_per_output=_macs_per_output(layer),
            im2col_per_output=_im2col_per_output(layer), per_sample=per_sample(layer)))
    known = {id(t) for t in inputs}
    ordered, pending = [], candidates
    while pending:
        ready = [n for n in pending if all(id(t) in known for t in n.inputs)]
        if not ready:
            raise ArgumentError("LMS", "model", f"{model.name!r}: layer {pending[0].name!r} "
                                "takes tensors no earlier layer of the model produces (a layer "
                                "called more than once, or on tensors from another model); "
                                "LMS plans models whose layers are each called once")
        for node in ready:
            known.update(id(t) for t in node.outputs)
        ordered.extend(ready)
        ready_ids = {id(n) for n in ready}
        pending = [n for n in pending if id(n) not in ready_ids]
    missing = [t for t in outputs if id(t) not in known]
    if missing:
        raise ArgumentError("LMS", "model", f"{model.name!r}: output {missing[0].name!r} is not "
                            "produced by the first call of any of its layers (a layer called "
                            "more than once?); LMS plans models whose layers are each called "
                            "once")
    return Graph(model=model, inputs=inputs, outputs=outputs, nodes=ordered, eigen=eigen)




def check_hard_limit(graph, batch, limit, where):
    """The hard limit: the largest single layer must fit under ``limit``
    bytes, whatever LMS does. Raises ``LayerError`` naming the layer."""
    if limit is None:
        return
    node, need = graph.largest_layer(batch)
    if need > limit:
        workspace = graph.workspace(node, batch)
        also = (f", and {fmt_bytes(workspace)} of Eigen's convolution workspace"
                if workspace else "")
        raise LayerLimitError(node.name, f"needs {fmt_bytes(need)} at once to train (inputs, "
                                    f"outputs and weights, and their gradients{also}, "
                                    f"batch {batch}) "
                                    f"but the memory limit is {fmt_bytes(limit)} ({where}); "
                                    "LMS cannot split a layer: use a smaller batch")


def part_sizes(batch, chunks):
    """The sizes of ``min(chunks, batch)`` nearly equal parts of a batch, the
    first parts one larger where it does not divide."""
    chunks = max(1, min(chunks, batch))
    return [batch // chunks + (1 if i < batch % chunks else 0) for i in range(chunks)]


@dataclasses.dataclass
class Block:
    """Consecutive layers run as one sub-model: ``kind`` is ``"plain"``,
    ``"remat"`` or ``"stage"``."""

    kind: str
    nodes: list
    inputs: tuple = ()
    outputs: tuple = ()
    #: the activation bytes of its layers (for the log)
    bytes: int = 0
    #: parts of the batch it runs in (``Graph.chunks``; remat blocks only)
    chunks: int = 1

    @property
    def names(self):
        first, last = self.nodes[0].name, self.nodes[-1].name
        return first if first == last else f"{first}..{last}"


def plan(graph, batch, threshold_bytes, choose, parts=False):
    """Cut the layers into blocks (see the module docstring).

    ``choose(run_nodes, batch) -> "remat" | "stage"`` picks the mechanism of
    one run of consecutive large layers. A run is rematerialized in segments
    whose byte budget is searched as Chen et al. do (a run of n equal layers
    gets about sqrt(n) segments), each ending where the segment's output is
    the only activation alive; a
    segment of one layer would keep its input instead of its output, saving
    nothing, so it runs plain. A staged run stages each layer on its own.
    ``parts``: remat blocks run in ``Graph.chunks`` parts of the batch.
    """
    nodes = graph.nodes
    sizes = [graph.out_bytes(n, batch) for n in nodes]
    large = [n.pure and s > threshold_bytes for n, s in zip(nodes, sizes)]
    alive_single = _single_alive(graph)
    groups, i = [], 0
    while i < len(nodes):
        j = i
        while j < len(nodes) and large[j] == large[i]:
            j += 1
        if not large[i]:
            groups.append(("plain", list(range(i, j))))
        elif choose([nodes[k] for k in range(i, j)], batch) == "stage":
            groups.extend(("stage", [k]) for k in range(i, j))
        else:
            groups.extend(_segments(list(range(i, j)), sizes, alive_single))
        i = j
    merged = []
    for kind, idx in groups:
        if kind == "remat" and len(idx) < 2:
            kind = "plain"
        if merged and kind == "plain" and merged[-1][0] == "plain":
            merged[-1][1].extend(idx)
        else:
            merged.append((kind, list(idx)))
    return [_block(graph, kind, idx, sizes, batch if parts else None) for kind, idx in merged]


def _segments(run, sizes, alive_single):
    """Chen et al.'s budgeted greedy split, with their search over the budget:
    for each budget B (a geometric grid from the largest layer to the run's
    total), close a segment once its layers hold >= B bytes at a point
    where one activation is alive (or at 3 B anywhere); keep the split with
    the smallest estimated peak, ``sum of the segments' outputs + the
    largest segment``."""
    total = sum(sizes[k] for k in run)
    largest = max(sizes[k] for k in run)
    best, budget = None, float(largest)
    while True:
        split = _split(run, sizes, alive_single, budget)
        kept = sum(sizes[seg[-1]] for seg in split)
        peak = kept + max(sum(sizes[k] for k in seg) for seg in split)
        if best is None or peak < best[0]:
            best = (peak, split)
        if budget >= total:
            break
        budget = min(total, budget * 1.25)
    return [("remat", seg) for seg in best[1]]


def _split(run, sizes, alive_single, budget):
    segments, current, acc = [], [], 0
    for k in run:
        current.append(k)
        acc += sizes[k]
        if k != run[-1] and ((acc >= budget and alive_single[k]) or acc >= 3 * budget):
            segments.append(current)
            current, acc = [], 0
    if current:
        segments.append(current)
    return segments


def _single_alive(graph):
    """Per node: after it runs, its outputs are the only activations still
    needed later (a cut there keeps one tensor; model inputs do not count,
    the caller holds them anyway)."""
    remaining = {}
    for node in graph.nodes:
        for t in node.inputs:
            remaining[id(t)] = remaining.get(id(t), 0) + 1
    for t in graph.outputs:
        remaining[id(t)] = remaining.get(id(t), 0) + 1
    inputs = {id(t) for t in graph.inputs}
    alive, result = set(), []
    for node in graph.nodes:
        for t in node.inputs:
            remaining[id(t)] -= 1
            if remaining[id(t)] == 0:
                alive.discard(id(t))
        own = {id(t) for t in node.outputs if remaining.get(id(t), 0) > 0}
        alive |= own
        result.append(bool(own) and alive - inputs == own)
    return result


def _block(graph, kind, idx, sizes, parts_batch):
    """One block; a remat block runs in ``Graph.chunks`` parts of
    ``parts_batch`` (None: whole)."""
    nodes = [graph.nodes[k] for k in idx]
    produced = {id(t) for n in nodes for t in n.outputs}
    inputs, seen = [], set()
    for n in nodes:
        for t in n.inputs:
            if id(t) not in produced and id(t) not in seen:
                seen.add(id(t))
                inputs.append(t)
    later = {id(t) for n in graph.nodes[idx[-1] + 1:] for t in n.inputs}
    later |= {id(t) for t in graph.outputs}
    outputs, seen = [], set()
    for n in nodes:
        for t in n.outputs:
            if id(t) in later and id(t) not in seen:
                seen.add(id(t))
                outputs.append(t)
    return Block(kind=kind, nodes=nodes, inputs=tuple(inputs), outputs=tuple(outputs),
                 bytes=sum(sizes[k] for k in idx),
                 chunks=(graph.chunks(nodes, parts_batch)
                         if kind == "remat" and parts_batch else 1))
