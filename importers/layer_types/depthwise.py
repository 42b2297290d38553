"""The depthwise convolutions of the MobileNet-era forks.

- ``ConvolutionDepthwise`` (the ``conv_dw_layer.cpp`` fork used by many
  MobileNet and MobileNet-YOLO files): one kh x kw filter per input channel;
  the top has the bottom's channels whatever ``num_output`` and ``group``
  say (its ``Reshape`` pushes ``bottom[0]->channels()``), weights
  (C, 1, kh, kw) and bias (C).
- ``DepthwiseConvolution`` (yonghenglh6/DepthwiseConvolution): a subclass of
  Caffe's ``ConvolutionLayer`` with a faster kernel, so exactly Convolution's
  semantics (``num_output``, ``group``), used where group = channels.
"""

from keras_caffe.importers.layer_types.base import MOBILENET, Example, layer_type
from keras_caffe.importers.layer_types.convolution import Convolution
from keras_caffe.proto import caffe_pb2


@layer_type("ConvolutionDepthwise")
class ConvolutionDepthwise(Convolution):
    """Depthwise convolution (one filter per channel; num_output and group
    ignored, as the fork does), kernel/stride/pad/dilation (or _h/_w), bias."""

    origin = MOBILENET
    examples = (
        Example("convolution_param { num_output: 4 kernel_size: 3 pad: 1 stride: 2 }",
                [(2, 4, 7, 7)]),
        Example("convolution_param { kernel_h: 3 kernel_w: 1 dilation: 2 bias_term: false }",
                [(1, 3, 6, 5)]),
    )

    def _as_convolution(self, layer, bottoms):
        """The layer as the BVLC Convolution it computes."""
        same = caffe_pb2.LayerParameter()
        same.CopyFrom(layer)
        channels = bottoms[0][1] if bottoms and len(bottoms[0]) > 1 else 1
        same.convolution_param.num_output = channels
        same.convolution_param.group = channels
        return same

    def shapes(self, layer, bottoms, state):
        return super().shapes(self._as_convolution(layer, bottoms), bottoms, state)

    def build(self, layer, bottoms, ctx):
        return super().build(self._as_convolution(layer, ctx.bottom_shapes), bottoms, ctx)


@layer_type("DepthwiseConvolution")
class DepthwiseConvolution(Convolution):
    """Convolution under another name (a faster kernel for group = channels):
    Convolution's num_output, group, kernel, stride, pad, dilation, bias."""

    origin = MOBILENET
    examples = (
        Example("convolution_param { num_output: 4 group: 4 kernel_size: 3 pad: 1 }",
                [(2, 4, 5, 5)]),
    )
