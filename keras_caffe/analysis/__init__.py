"""``analyze``: the sizes, work and data-parallel communication of a Caffe net.

What is computed, for each layer and in total (float32 everywhere, 4 bytes a
value; "MB" in the rendered tables is 10**6 bytes, as FireCaffe counts it):

- ``|W|``, the weights: every parameter blob the layer owns (Caffe's blob
  shapes: Convolution (C_out, C_in/group, k_h, k_w) + bias, InnerProduct
  (N, K) + bias, BatchNorm's three statistics blobs, Scale, PReLU, ...).
  A blob shared by name (``param { name: ... }``) counts once, at its first
  owner. This is FireCaffe's ``|W| = sum_L |W_L|`` (Iandola et al., CVPR
  2016, section 3): the data each worker sends per step in data-parallel
  training, its weight gradients.
- ``|D|``, the activations: every layer's output blobs for the whole batch,
  ``|D| = sum_L |D_L|`` with ``|D_L|`` = elements of layer L's tops x 4
  bytes, the batch included (FireCaffe section 3: the data sent per step in
  model-parallel training). In-place layers (a ReLU writing its bottom) count
  as layers of their own, since each produces an output and a gradient;
  Split layers count 0 (their tops are the bottom, shared, in Caffe). The
  Input (data) layer counts its tops.

  Source note: the FireCaffe paper's text could not be retrieved while this
  was written, so its equations (1) and (2) were not checked word for word;
  the two definitions above are the task's stated fallback (|W| = weights x 4
  bytes, |D| = output activations x batch x 4 bytes summed over the layers).
  |W| reproduces the paper's Table 1
  (NiN 30 MB, AlexNet 249, GoogLeNet 54, VGG-19 575) within 2.1% with
  MB = 10**6 bytes (not 2**20, which misses AlexNet by 6.6%); Table 1's
  GoogLeNet is the trained net with its two auxiliary classifiers (53.5 MB),
  the deploy net alone is 28.0 MB.
- FLOPs per batch: 2 FLOPs per multiply-add of Convolution, Deconvolution and
  InnerProduct (bias additions and all other layers -- ReLU, pooling, LRN,
  BatchNorm, ... -- count 0: they are a few percent at most of these nets'
  work). Backward is taken as 2 x forward (the gradients with respect to the
  input and to the weights each cost one forward), so a training step is
  3 x forward.
- Communication time per step of synchronous data-parallel SGD over
  ``p = workers`` workers, each link ``beta = bandwidth`` bytes/s, latency
  ignored (FireCaffe section 4):

  - parameter server: ``2 |W| p / beta`` (every worker sends its gradients
    to the server and receives the new weights, serialised at the server);
  - reduction tree: ``2 |W| log2(p) / beta`` (reduce up and broadcast down a
    binary tree; ``log2`` is the paper's, so a p that is not a power of two
    gets a fractional depth);
  - ring all-reduce (not in FireCaffe; the standard bandwidth-optimal
    algorithm): ``2 (p - 1) / p |W| / beta``.

Shapes follow Caffe's own ``Reshape`` rules, computed with Python integers by
each layer type's shape rule (``keras_caffe.importers.layer_types``: the one
the importer also runs): nothing is allocated, so a net with absurd sizes is
analysed as cheaply as a small one. The first axis of every input is the
batch: ``batch`` replaces the net's own (``batch=None`` keeps it). Data layers
that read a database (Data, ImageData, HDF5Data) take their shapes from the
source's first record, as Caffe does, when the source is found; otherwise (and
for WindowData and AnnotatedData, which keras-caffe does not read)
give them with ``input_shapes``, or analyse the deploy net.

Bandwidth: ``analyze`` takes bytes per second, as a number, or a string with
its unit (``"10Gbit/s"``, ``"56 Gbps"``, ``"1.25 GB/s"``; ``parse_bandwidth``
reads these; lower-case ``b`` is bits, upper-case ``B`` bytes, prefixes are
decimal, ``Ki``/``Mi``/``Gi`` binary).

Scaling (``speedup.py``): ``scaling(report, workers, device_flops)`` predicts,
for each worker count ``p``, the step time ``compute + communication`` of
the three schemes (``max`` of the two with ``overlap=True``) and the
speed-up over one worker that communicates nothing; compute is the busiest
worker's share ``ceil(B / p)`` of the batch's forward + backward FLOPs at
``device_flops`` sustained FLOP/s, an assumption the caller states.
``analyze_scaling`` is the command line's entry (``--workers 1,2,4
--device-flops 6.1T``).
"""

from keras_caffe.analysis.communication import (
    parameter_server_time,
    parse_bandwidth,
    reduction_tree_time,
    ring_allreduce_time,
)
from keras_caffe.analysis.core import analyze
from keras_caffe.analysis.report import LayerStats, Report
from keras_caffe.analysis.speedup import (
    DEFAULT_WORKERS,
    Scaling,
    ScalingRow,
    analyze_scaling,
    parse_flops,
    parse_workers,
    scaling,
)
from keras_caffe.analysis.core import UnknownLayerTypeError
from keras_caffe.analysis.units import BYTES_PER_VALUE, DEFAULT_BANDWIDTH, MB

__all__ = [
    "analyze", "Report", "LayerStats", "parse_bandwidth", "parameter_server_time",
    "reduction_tree_time", "ring_allreduce_time", "UnknownLayerTypeError",
    "DEFAULT_BANDWIDTH", "BYTES_PER_VALUE", "MB", "scaling", "Scaling", "ScalingRow",
    "analyze_scaling", "parse_flops", "parse_workers", "DEFAULT_WORKERS",
]
