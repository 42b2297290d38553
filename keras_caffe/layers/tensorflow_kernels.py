"""TensorFlow's own kernels for a few Caffe layer types, imported only on
Keras's TensorFlow backend (``keras_caffe.layers.base.tensorflow_kernels``).

Each is a speed path around a slow TensorFlow CPU kernel (Eigen's or
oneDNN's gradient kernels), with the same numbers as the ``keras.ops``
formula every backend runs otherwise, to summation order:

- ``own_backward_conv``: Convolution with its own backward (XLA's filter
  gradient, the input gradient as a forward convolution), and a
  one-channel input's forward as shifted products (``conv.takes_own_backward``
  says which layers).
- ``large_kernel_matmul``: InnerProduct's input gradient as
  ``(kernel @ dy^T)^T`` for large kernels.
- ``routed_max_pool``: MAX pooling with Caffe's mask and backward compiled
  with XLA, on Eigen's kernels.
- ``compiled_lrn``: LRN across channels (float32) on CPUs, forward and
  backward each one XLA program; ``lrn``: TensorFlow's LRN op elsewhere.
- ``checked_take``, ``boolean_mask``: BatchReindex with Caffe's CHECKs as
  graph assertions, Filter with a data-dependent batch.
- ``map_rois``: the ROI layers' per-region map as ``tf.map_fn`` with its
  output signature given (no extra call to find it, zero regions allowed).
- ``non_max_suppression``, ``assert_single_image``: Proposal's NMS as
  TensorFlow's kernel (one op, where the ``keras.ops`` loop runs one
  iteration per kept box), and its one-image CHECK for a batch unknown
  until run.
"""

import tensorflow as tf


def own_backward_conv(x, kernel, bias, pad, stride=(1, 1)):
    """``conv(pad(x), kernel, stride) + bias`` for an NHWC ``x``, no dilation,
    ``pad = (ph, pw)`` zeros, ``bias`` None or (M,), with a backward made
    for TensorFlow's CPU kernels, whose gradient kernels are slow: on Eigen's
    ``Conv2DBackpropFilter`` ran 1.2-3.1x slower than XLA's,
    ``Conv2DBackpropInput`` up to 2.4x slower than the same sums as a
    ``Conv2D``; on oneDNN's up to 2.3x and 1.9x (TF 2.21, 2-core AMD EPYC;
    ``takes_own_backward`` says which layers take it).
    ``benchmarks/eigen_backward.py`` times the layers both ways.

    - The kernel's gradient ``dW[u, v, c, m] = sum_{n,i,j} pad(x)[n, s i+u,
      s j+v, c] dy[n, i, j, m]`` is XLA's (``_filter_gradient``; CaffeNet's
      conv1, 11x11 stride 4, batch 16: 34 against 46 ms); the bias's
      is ``sum_{n,i,j} dy``, XLA's too (``_bias_gradient``: one thread,
      0.25 against 0.50 ms for LeNet's conv1, 0.39 against 1.19 ms for
      CaffeNet's conv2, Eigen's ``Sum`` on both threads; oneDNN's the
      same). Each is its own op, so TensorFlow skips the
      one a frozen blob (``lr_mult: 0``, a stopped gradient) does not use,
      as Caffe's ``param_propagate_down``.
    - With stride 1 the input's gradient is the convolution of ``dy``
      padded by ``k - 1 - pad`` with the kernel turned by 180 degrees and
      its channel axes swapped, where the convolution keeps or grows the
      image (``2 pad >= k - 1``, where it does no more multiplications than
      TensorFlow's column-scatter kernel); else TensorFlow's
      ``Conv2DBackpropInput`` (LeNet's unpadded 5x5: 1.8 ms against 4.9 ms
      as a convolution).
    - A one-channel input's forward at stride 1 is ``_one_channel_conv``.

    The sums run in another order than TensorFlow's or Caffe's: relative
    differences of about 1e-6."""
    (ph, pw) = pad
    stride = tuple(stride)
    strides = [1, stride[0], stride[1], 1]
    paddings = [[0, 0], [ph, ph], [pw, pw], [0, 0]]
    kh, kw = kernel.shape[0], kernel.shape[1]
    # Tensors, not variables: a custom gradient over a variable read inside
    # it would need the variables= form.
    kernel = tf.convert_to_tensor(kernel)
    bias = None if bias is None else tf.convert_to_tensor(bias)

    def forward(x, kernel, bias):
        if x.shape[3] == 1 and stride == (1, 1):
            return _one_channel_conv(x, kernel, bias, pad)
        y = tf.nn.conv2d(x, kernel, strides, paddings if ph or pw else "VALID")
        return y if bias is None else tf.nn.bias_add(y, bias)

    def input_gradient(dy, kernel):
        with tf.name_scope("conv_input_gradient"):
            return _input_gradient(dy, kernel)

    def _input_gradient(dy, kernel):
        qh, qw = kh - 1 - ph, kw - 1 - pw
        if stride == (1, 1) and 0 <= qh <= ph and 0 <= qw <= pw:
            turned = tf.transpose(tf.reverse(kernel, (0, 1)), (0, 1, 3, 2))
            return tf.nn.conv2d(dy, turned, 1, [[0, 0], [qh, qh], [qw, qw], [0, 0]])
        return tf.raw_ops.Conv2DBackpropInput(
            input_sizes=tf.shape(x), filter=kernel, out_backprop=dy, strides=strides,
            padding="EXPLICIT" if ph or pw else "VALID",
            explicit_paddings=sum(paddings, []) if ph or pw else [])

    def filter_gradient(dy):
        with tf.name_scope("conv_filter_gradient"):
            return _filter_gradient(x, dy, (kh, kw), pad, stride)

    if bias is None:
        @tf.custom_gradient
        def conv(x, kernel):
            def backward(dy):
                return input_gradient(dy, kernel), filter_gradient(dy)
            return forward(x, kernel, None), backward

        return conv(x, kernel)

    @tf.custom_gradient
    def biased_conv(x, kernel, bias):
        def backward(dy):
            return input_gradient(dy, kernel), filter_gradient(dy), _bias_gradient(dy)
        return forward(x, kernel, bias), backward

    return biased_conv(x, kernel, bias)


def _one_channel_conv_xla(x, kernel, bias, pad):
    """The convolution of a one-channel NHWC ``x`` as ``kh * kw`` shifted
    products, ``y = b + sum_{u,v} pad(x)[:, u:u+OH, v:v+OW, :] * W[u, v, 0, :]``,
    which XLA compiles into one loop: 0.81 ms for LeNet's conv1 (64x28x28x1,
    5x5, 20 outputs) against 2.29 ms for Eigen's ``Conv2D``, whose matrix
    product has only 25 columns there. With three channels Eigen's is the
    faster (CIFAR-10 quick's conv1: 6.6 against 9.7 ms)."""
    (ph, pw) = pad
    kh, kw = kernel.shape[0], kernel.shape[1]
    if ph or pw:
        x = tf.pad(x, [[0, 0], [ph, ph], [pw, pw], [0, 0]])
    oh, ow = x.shape[1] - kh + 1, x.shape[2] - kw + 1
    y = None
    for u in range(kh):
        for v in range(kw):
            term = x[:, u:u + oh, v:v + ow, :] * kernel[u, v, 0]
            y = term if y is None else y + term
    return y if bias is None else y + bias


def _filter_gradient_xla(x, dy, kernel_size, pad, stride):
    """dW of ``own_backward_conv``, as XLA compiles TensorFlow's filter gradient:
    a convolution of ``x`` with ``dy`` over the batch axis, without
    materialized transposes."""
    (ph, pw) = pad
    return tf.raw_ops.Conv2DBackpropFilter(
        input=x, filter_sizes=[kernel_size[0], kernel_size[1], x.shape[3], dy.shape[3]],
        out_backprop=dy, strides=[1, stride[0], stride[1], 1],
        padding="EXPLICIT" if ph or pw else "VALID",
        explicit_paddings=[0, 0, ph, ph, pw, pw, 0, 0] if ph or pw else [])


#: One XLA program per shape (``tf.function`` traces each once).
_one_channel_conv = tf.function(_one_channel_conv_xla, jit_compile=True)
_filter_gradient = tf.function(_filter_gradient_xla, jit_compile=True)
_bias_gradient = tf.function(lambda dy: tf.reduce_sum(dy, axis=(0, 1, 2)), jit_compile=True)


def large_kernel_matmul(x, kernel):
    """``x @ kernel`` for a (N, K) ``x`` and a large (K, M) ``kernel``, with
    the input's gradient computed as ``(kernel @ dy^T)^T``.

    TensorFlow's gradient ``dy @ kernel^T`` reads the kernel transposed,
    which both CPU kernel families do slowly: CaffeNet's fc6 (batch 16,
    9216 x 4096) took 67-70 ms that way against 14-15 ms as ``(kernel @
    dy^T)^T`` (TF 2.21, 2-core AMD EPYC, Eigen and oneDNN); LeNet's ip1
    (batch 64, 800 x 500) 0.9-1.3 against 0.7-0.9 ms. Below ``LARGE_KERNEL``
    weights the two are level (CIFAR-10 quick's ip1, 1024 x 64: 0.41 / 0.44
    ms), so the layer keeps TensorFlow's. The kernel's gradient is
    TensorFlow's ``x^T @ dy``. Each output element is the same sum in
    another order than TensorFlow's."""
    x = tf.convert_to_tensor(x)
    kernel = tf.convert_to_tensor(kernel)

    @tf.custom_gradient
    def matmul(x, kernel):
        def backward(dy):
            return (tf.transpose(tf.matmul(kernel, dy, transpose_b=True)),
                    tf.matmul(x, dy, transpose_a=True))
        return tf.matmul(x, kernel), backward

    return matmul(x, kernel)


def routed_max_pool(x, kernel, stride):
    """MAX pooling of an NHWC ``x`` over valid windows with Caffe's mask: the
    forward keeps, beside each window's maximum, which of its ``kh * kw``
    cells held it first (``max_pool_offsets``, one XLA program), and the
    backward routes the gradient by that offset (``route_by_offsets``,
    another), as Caffe's ``Backward_cpu`` routes by its mask."""
    kernel, stride = tuple(kernel), tuple(stride)

    @tf.custom_gradient
    def pool(x):
        y, offsets = _compiled_offsets(x, kernel, stride)

        def backward(dy):
            return _compiled_route(offsets, dy, x.shape[1], x.shape[2], kernel, stride)

        return y, backward

    return pool(x)


def _window_cells(x, u, v, out, stride):
    """Cell (u, v) of every window: ``x[:, u::sh, v::sw]`` cut to the output."""
    (oh, ow), (sh, sw) = out, stride
    return x[:, u:u + sh * (oh - 1) + 1:sh, v:v + sw * (ow - 1) + 1:sw, :]


def max_pool_offsets(x, kernel, stride):
    """``(y, offsets)``: each valid window's maximum and the offset
    ``u * kw + v`` of its first cell holding it, scanning rows then columns
    (``PoolingLayer::Forward_cpu``: a cell replaces the maximum only when
    strictly greater, so ties keep the earliest). The offsets are int8 for
    windows of up to 127 cells, else int32."""
    (kh, kw), (sh, sw) = kernel, stride
    out = ((x.shape[1] - kh) // sh + 1, (x.shape[2] - kw) // sw + 1)
    dtype = tf.int8 if kh * kw <= 127 else tf.int32
    best = _window_cells(x, 0, 0, out, stride)
    offsets = tf.zeros_like(best, dtype=dtype)
    for u in range(kh):
        for v in range(kw):
            if u == v == 0:
                continue
            cells = _window_cells(x, u, v, out, stride)
            greater = cells > best
            best = tf.where(greater, cells, best)
            offsets = tf.where(greater, tf.constant(u * kw + v, dtype), offsets)
    return best, offsets


def route_by_offsets(offsets, dy, height, width, kernel, stride):
    """The gradient of ``max_pool_offsets``' ``y`` for the output gradient
    ``dy``: Caffe's ``PoolingLayer::Backward_cpu`` for MAX,
    ``bottom_diff[mask[i]] += top_diff[i]`` over the outputs ``i`` in order,
    on an input of ``height x width``.

    Window offset (u, v)'s outputs send ``dy`` where it won. Input position
    ``o * s + u`` with ``u = q * s + r`` is cell ``o + q`` of phase ``r``, so
    each of the ``s x s`` phases sums its offsets' shifted gradients (in
    Caffe's order: the earlier output first) and the phases interleave back
    into the input's shape. Reading one small offset per output instead of
    the input's cells made CIFAR-10 quick's pool1 (100x33x33x32, 3x3 stride
    2) forward and backward 7.6 ms against 10.5 for routing by equality with
    the maximum (11.4 against 17.3 ms CPU; TF 2.21, Eigen, 2-core AMD EPYC)."""
    (kh, kw), (sh, sw) = kernel, stride
    oh, ow = dy.shape[1], dy.shape[2]
    qh, qw = -(-kh // sh), -(-kw // sw)  # offsets per phase
    zero = tf.zeros_like(dy)
    batch, channels = tf.shape(dy)[0], dy.shape[3]
    rows_a, cols_b = oh + qh - 1, ow + qw - 1
    phase_rows = []
    for rh in range(sh):
        phases = []
        for rw in range(sw):
            total = None
            for a in reversed(range(qh)):  # output o - a before o - a + 1: Caffe's order
                for b in reversed(range(qw)):
                    u, v = a * sh + rh, b * sw + rw
                    if u >= kh or v >= kw:
                        continue
                    part = tf.where(tf.equal(offsets, tf.cast(u * kw + v, offsets.dtype)), dy,
                                    zero)
                    if qh > 1 or qw > 1:
                        part = tf.pad(part, [[0, 0], [a, qh - 1 - a], [b, qw - 1 - b], [0, 0]])
                    total = part if total is None else total + part
            if total is None:  # kernel smaller than stride: this phase is in no window
                total = tf.zeros((batch, rows_a, cols_b, channels), dy.dtype)
            phases.append(total)
        phase_rows.append(tf.stack(phases, axis=3))  # (N, A, B, sw, C)
    dx = tf.reshape(tf.stack(phase_rows, axis=2), (batch, rows_a * sh, cols_b * sw, channels))
    dx = dx[:, :height, :width, :]
    extra_h, extra_w = max(0, height - rows_a * sh), max(0, width - cols_b * sw)
    if extra_h or extra_w:  # input rows and columns past the last window
        dx = tf.pad(dx, [[0, 0], [0, extra_h], [0, extra_w], [0, 0]])
    return dx


#: One XLA program per shape each: fused, the slices and selects above run in
#: about a sixth of their time as separate TensorFlow ops.
_compiled_offsets = tf.function(max_pool_offsets, jit_compile=True)
_compiled_route = tf.function(route_by_offsets, jit_compile=True)


def lrn(x, depth_radius, bias, alpha, beta):
    """TensorFlow's LRN op (NHWC): its gradient kernel ran 3-4x faster than
    the layer's slices (``keras_caffe.layers.lrn``); on GPUs (cuDNN's)."""
    return tf.nn.local_response_normalization(x, depth_radius=depth_radius, bias=bias,
                                              alpha=alpha, beta=beta)


def compiled_lrn(x, size, alpha, beta, k):
    """Caffe's ACROSS_CHANNELS LRN of an NHWC float32 ``x`` and its gradient,
    each one XLA program (``lrn_layer.cpp``'s ``CrossChannelForward_cpu`` and
    ``CrossChannelBackward_cpu``):

    - ``scale = k + alpha / size * sum of x^2`` over ``size`` channels centred
      on each (zero past the borders), ``y = x * scale^-beta``;
    - ``dx = dy * scale^-beta - (2 alpha beta / size) * x * window sum of
      (dy * y / scale)``, with ``scale`` kept from the forward as Caffe keeps it.

    Fused, forward and backward took 3.7 ms for CaffeNet's norm1
    (16x27x27x96) against 14.7 ms for TensorFlow's ``LRN`` and ``LRNGrad``
    with Eigen's kernels, and 3.5 against 13.0 ms with oneDNN's; norm2
    (16x13x13x256) 2.3 against 10.4 and 1.9 against 9.7 ms (TF 2.21, 2-core
    AMD EPYC, median of 5; ``benchmarks/eigen_backward.py --layers norm``).
    CPUs only (``keras_caffe.kernels.cpu_only``): GPUs keep cuDNN's."""
    @tf.custom_gradient
    def normalize(x):
        y, scale = _compiled_lrn(x, size, alpha, beta, k)

        def backward(dy):
            return _compiled_lrn_gradient(x, y, scale, dy, size, alpha, beta)

        return y, backward

    return normalize(x)


def _channel_window_sum(v, size):
    """The sum over ``size`` channels centred on each (zero past the borders)."""
    half = (size - 1) // 2
    channels = v.shape[-1]
    padded = tf.pad(v, [[0, 0]] * (v.shape.rank - 1) + [[half, size - 1 - half]])
    total = padded[..., 0:channels]
    for i in range(1, size):
        total = total + padded[..., i:i + channels]
    return total


def _negative_power(scale, beta):
    """``scale^-beta``; Caffe's usual betas without ``pow`` (exp and log per
    element: XLA's pow made the whole LRN 3x slower at beta 0.75)."""
    if beta == 0.75:
        root = tf.math.rsqrt(scale)
        return root * tf.sqrt(root)
    if beta == 0.5:
        return tf.math.rsqrt(scale)
    if beta == 1.0:
        return tf.math.reciprocal(scale)
    return tf.pow(scale, -beta)


def _lrn_forward(x, size, alpha, beta, k):
    scale = k + (alpha / size) * _channel_window_sum(x * x, size)
    return x * _negative_power(scale, beta), scale


def _lrn_gradient(x, y, scale, dy, size, alpha, beta):
    accumulated = _channel_window_sum(dy * y / scale, size)
    return dy * _negative_power(scale, beta) - (2.0 * alpha * beta / size) * x * accumulated


_compiled_lrn = tf.function(_lrn_forward, jit_compile=True)
_compiled_lrn_gradient = tf.function(_lrn_gradient, jit_compile=True)


def checked_take(x, index, layer):
    """``x[index]`` along the batch in a graph, an index outside [0, N) an
    assertion naming ``layer``, as Caffe's CHECKs (``BatchReindexLayer::
    Forward_cpu``; eager calls check in ``value_checks``)."""
    message = (f"layer {layer!r}: an index of bottom 1 is outside [0, N), N the batch of "
               f"bottom 0 (batch_reindex_layer.cpp's CHECK)")
    checks = [tf.debugging.assert_non_negative(index, message=message),
              tf.debugging.assert_less(index, tf.shape(x)[0], message=message)]
    with tf.control_dependencies(checks):
        return tf.gather(x, index, axis=0)


def boolean_mask(blobs, keep):
    """Each blob's rows where ``keep`` holds (Filter)."""
    return [tf.boolean_mask(b, keep) for b in blobs]


def map_rois(fn, rois, dtype):
    """``fn`` over the rows of ``rois`` (``keras_caffe.layers.regions.per_roi``)."""
    return tf.map_fn(fn, rois, fn_output_signature=dtype)


def non_max_suppression(corners, scores, count, most, threshold):
    """``(indices, found)``: TensorFlow's greedy NMS over the first ``count``
    of ``corners`` (K, 4) (already in score order), at most ``most`` kept, a
    box suppressed by a kept one it overlaps by more than ``threshold``;
    ``indices`` (most,) are the kept rows in order, then zeros."""
    chosen = tf.image.non_max_suppression(corners[:count], scores[:count], most,
                                          iou_threshold=threshold)
    found = tf.shape(chosen)[0]
    return tf.pad(chosen, [[0, most - found]]), found


def assert_single_image(scores, message):
    """Proposal's CHECK of a batch of one image, run with the graph."""
    tf.debugging.assert_equal(tf.shape(scores)[0], 1, message)
