"""What keras-caffe's layers share: Caffe blob conversion and layouts."""

import keras
import numpy as np
from keras import ops

from keras_caffe.errors import WeightsError

from keras_caffe._serializable import register  # noqa: E402


if keras.backend.backend() == "tensorflow":
    # TensorFlow optional: its speed paths (Convolution, InnerProduct, MAX
    # pooling, LRN, BatchReindex, Filter, the ROI layers' map) are loaded on
    # its backend only; every other backend runs the keras.ops formulas.
    from keras_caffe.layers import tensorflow_kernels
else:
    tensorflow_kernels = None


def on_tensorflow():
    """Whether Keras's backend is TensorFlow (where ``tensorflow_kernels`` run)."""
    return tensorflow_kernels is not None


def top_k(x, k):
    """``(values, indices)`` of the ``k`` largest along the last axis, best
    first, equal values in index order (lower index first). TensorFlow's and
    JAX's ``top_k`` keep that order themselves; PyTorch's ``topk`` leaves
    ties in no set order, so there the ``k`` first of a stable descending
    sort are taken (the same values and indices)."""
    if keras.backend.backend() != "torch":
        return ops.top_k(x, k, sorted=True)
    order = ops.argsort(ops.negative(x), axis=-1)[..., :k]
    return ops.take_along_axis(x, order, axis=-1), order


def divide(x, divisor):
    """``x / divisor`` as IEEE divides, also where XLA compiles it (JAX, or
    TensorFlow's ``jit_compile``): XLA turns a division by a constant into a
    multiplication by its reciprocal, off by one ulp for about a third of
    the quotients (``7 / 3`` then gives ``ceil(3 * 7 / 3) = 8``). Caffe's
    bin boundaries (ROI pooling) are floors and ceilings of such float
    quotients, so there the divisor is made to depend on ``x`` (``x * 0 +
    divisor``, the divisor itself for a finite ``x``), which XLA divides by."""
    return x / (x * 0.0 + divisor)


class CaffeBlobs:
    """Mixin of layers that hold Caffe blobs (learned or statistics).

    ``caffe_blobs()`` returns the layer's weights in Caffe's shapes and order
    (what a .caffemodel holds); ``set_caffe_blobs(blobs)`` loads them,
    converting layouts once, here, so the graph has no transposes.
    """

    caffe_type = None

    def __init__(self, *args, caffe_name=None, param_multipliers=None, caffe_sharers=None,
                 **kwargs):
        super().__init__(*args, **kwargs)
        # Keras forbids '/' in layer names, which Caffe nets use freely.
        self.caffe_name = caffe_name or self.name
        #: Caffe's ``param { lr_mult decay_mult }`` per blob, [[lr, decay], ...].
        self.param_multipliers = [list(map(float, m)) for m in (param_multipliers or [])]
        #: The Caffe layers that share all of this layer's blobs (``param {
        #: name }``): this Keras layer is applied for them too, so they use
        #: its variables and their gradients add up, as in Caffe.
        self.caffe_sharers = [str(n) for n in (caffe_sharers or [])]

    def get_config(self):
        config = super().get_config()
        config["caffe_name"] = self.caffe_name
        config["param_multipliers"] = self.param_multipliers
        if self.caffe_sharers:
            config["caffe_sharers"] = self.caffe_sharers
        return config

    @property
    def caffe_parts(self):
        """The Caffe layers this Keras layer holds: [(name, type, weight count)].

        One for most layers; a fused BatchNorm+Scale holds two. Its weights
        are the parts' blobs, in order.
        """
        return [(self.caffe_name, self.caffe_type, len(self.caffe_variables()))]

    def caffe_variables(self):
        """The variables holding the Caffe blobs, in Caffe's blob order.

        (Keras's ``weights`` lists trainable variables first, which is not
        Caffe's order where a layer mixes both.)
        """
        return list(self.weights)

    def blob(self, variable):
        """``variable`` as the layer's call reads it: with its gradient
        stopped when the blob's ``lr_mult`` is 0 (``param_multipliers``).

        Caffe computes no gradient for such a blob (``Net::Init`` sets its
        ``param_propagate_down`` to false), and TensorFlow then computes none
        either: where a layer and everything below it is frozen, no backward
        work is done for them. The optimizer takes the missing gradient as
        0 (``CaffeOptimizer.frozen``), so the numbers are Caffe's.
        """
        if variable is None or not self.param_multipliers:
            return variable
        for candidate, (lr_mult, _) in zip(self.caffe_variables(), self.param_multipliers):
            if candidate is variable:
                return ops.stop_gradient(variable) if lr_mult == 0 else variable
        return variable

    def caffe_blob_shapes(self):
        """The shapes Caffe's blobs for this layer have."""
        return [tuple(b.shape) for b in self.caffe_blobs()]

    def set_caffe_blobs(self, blobs):
        expected = self.caffe_blob_shapes()
        got = [tuple(np.shape(b)) for b in blobs]
        if len(got) != len(expected):
            raise WeightsError(
                f"layer {self.name!r}: {len(got)} blobs in the weights, the net needs "
                f"{len(expected)} {expected}"
            )
        for i, (g, e) in enumerate(zip(got, expected)):
            if g != e and int(np.prod(g)) == int(np.prod(e)) and len(g) != len(e):
                continue  # legacy 4-D (1, 1, out, in) blobs of the same size
            if g != e:
                raise WeightsError(
                    f"layer {self.name!r}: blob {i} has shape {g} in the weights, "
                    f"the net needs {e}"
                )
        blobs = [np.asarray(b, np.float32).reshape(e) for b, e in zip(blobs, expected)]
        for variable, value in zip(self.caffe_variables(), self.keras_weights_from_caffe(blobs)):
            variable.assign(value)

    def caffe_blobs(self):
        return self.caffe_from_keras_weights(
            [ops.convert_to_numpy(v) for v in self.caffe_variables()])

    def keras_weights_from_caffe(self, blobs):
        """Caffe blobs (in Caffe's shapes) -> the layer's Keras weights.
        The default is the identity: the layer keeps Caffe's layout."""
        return blobs

    def caffe_from_keras_weights(self, weights):
        """The layer's Keras weights -> Caffe blobs (inverse of the above)."""
        return list(weights)


class Fillers:
    """Mixin: ``kernel_initializer`` / ``bias_initializer`` (Caffe's
    ``weight_filler`` / ``bias_filler``; the importer passes ``CaffeFiller``s)."""

    def __init__(self, *args, kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 **kwargs):
        super().__init__(*args, **kwargs)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def get_config(self):
        config = super().get_config()
        config["kernel_initializer"] = keras.initializers.serialize(self.kernel_initializer)
        config["bias_initializer"] = keras.initializers.serialize(self.bias_initializer)
        return config


def check_data_format(data_format):
    if data_format not in ("channels_last", "channels_first"):
        raise ValueError(f"data_format must be 'channels_last' or 'channels_first', got {data_format!r}")
    return data_format


def to_nhwc(x, data_format):
    """Layers compute in NHWC (the layout TF's CPU kernels support)."""
    return ops.transpose(x, (0, 2, 3, 1)) if data_format == "channels_first" else x


def from_nhwc(x, data_format):
    return ops.transpose(x, (0, 3, 1, 2)) if data_format == "channels_first" else x


def pair(value):
    return tuple(value) if isinstance(value, (tuple, list)) else (value, value)
