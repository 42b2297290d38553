"""Image decoding and resizing as Caffe's OpenCV calls do them, in TensorFlow ops.

Caffe reads images with ``cv::imread`` / ``cv::imdecode`` (src/caffe/util/io.cpp)
and resizes them with ``cv::resize(..., INTER_LINEAR)``. The functions here
give the same pixels:

- **Channel order.** OpenCV delivers BGR (BGRA with an alpha channel when read
  unchanged); TensorFlow decodes RGB, so the channels are reversed.
- **Color and gray.** ``mode="color"`` gives 3 channels (a gray image is
  replicated, alpha dropped), ``mode="gray"`` 1 channel, ``mode="native"`` the
  channels as stored (``cv::imdecode(buf, -1)``). PNG and JPEG are decoded by the
  same libraries OpenCV uses, asked for the same thing: libpng's
  ``png_set_rgb_to_gray(png, 1, 0.299, 0.587)`` (both OpenCV's and TensorFlow's
  PNG decoders call exactly this; it computes ``(9797 R + 19234 G + 3737 B) >> 15``,
  which is not cvtColor's rounding) and libjpeg's grayscale output with the
  accurate integer DCT (``JDCT_ISLOW``, OpenCV's default; TensorFlow's own
  default is the fast DCT, so ``dct_method="INTEGER_ACCURATE"`` is passed).
  Other formats (BMP, GIF) are decoded in color and converted with OpenCV's
  ``cvtColor`` fixed-point formula ``(4899 R + 9617 G + 1868 B + 8192) >> 14``.
- **Resize.** ``resize_linear`` is OpenCV's 8-bit ``INTER_LINEAR`` path
  (imgproc/src/resize.cpp: ``HResizeLinear`` + ``VResizeLinear`` with
  ``INTER_RESIZE_COEF_BITS = 11``): half-pixel source coordinates computed in
  float, weights rounded to 11-bit fixed point, a horizontal pass in int32 and a
  vertical pass ``(((b0 * (S0 >> 4)) >> 16) + ((b1 * (S1 >> 4)) >> 16) + 2) >> 2``.
  An exact 2x downscale, which OpenCV sends to its fast INTER_AREA path, comes
  out the same through these formulas (``(a + b + c + d + 2) >> 2``).

Known differences: OpenCV's ``imread`` applies a JPEG's EXIF orientation, which
TensorFlow does not; JPEG pixels can differ by the libjpeg builds' versions.
No OpenCV build was available to compare against: the resize follows OpenCV's
source, its tests check the properties that source implies.
"""

import tensorflow as tf

_PNG = b"\x89PNG\r\n\x1a\n"
_MODES = ("color", "gray", "native")


def known_format(contents):
    """Whether each string starts like a JPEG, PNG, GIF or BMP file (elementwise)."""
    three = tf.strings.substr(contents, 0, 3)
    return (tf.equal(three, b"\xff\xd8\xff")  # tf.io.is_jpeg's test
            | tf.equal(tf.strings.substr(contents, 0, 8), _PNG)
            | tf.equal(three, b"GIF")
            | tf.equal(tf.strings.substr(contents, 0, 2), b"BM"))


def decode(contents, mode="color"):
    """Decode an encoded image to uint8 (H, W, C) in OpenCV's channel order."""
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
    channels = {"color": 3, "gray": 1, "native": 0}[mode]

    def jpeg():
        return tf.io.decode_jpeg(contents, channels=channels, dct_method="INTEGER_ACCURATE")

    def png():
        return tf.io.decode_png(contents, channels=channels)

    def other():
        image = tf.io.decode_image(contents, channels=0 if mode == "gray" else channels,
                                   expand_animations=False)
        return _gray(image) if mode == "gray" else image

    is_png = tf.equal(tf.strings.substr(contents, 0, 8), _PNG)
    image = tf.cond(tf.io.is_jpeg(contents), jpeg, lambda: tf.cond(is_png, png, other))
    return _to_bgr(image)


def _gray(image):
    """OpenCV's BGR2GRAY on an RGB(A) or gray image (fixed point, 14 bits)."""
    def convert():
        rgb = tf.cast(image[..., :3], tf.int32)
        y = _shift(rgb[..., 0] * 4899 + rgb[..., 1] * 9617 + rgb[..., 2] * 1868 + 8192, 14)
        return tf.cast(y, tf.uint8)[..., None]

    return tf.cond(tf.shape(image)[-1] >= 3, convert, lambda: image[..., :1])


def _shift(x, bits):
    """Arithmetic right shift of an int32 tensor (C's ``>>`` on int)."""
    return tf.bitwise.right_shift(x, tf.constant(bits, x.dtype))


def _to_bgr(image):
    """RGB -> BGR and RGBA -> BGRA; 1- and 2-channel images unchanged."""
    channels = tf.shape(image)[-1]
    order = tf.case([(tf.equal(channels, 3), lambda: tf.constant([2, 1, 0])),
                     (tf.equal(channels, 4), lambda: tf.constant([2, 1, 0, 3]))],
                    default=lambda: tf.range(channels))
    return tf.gather(image, order, axis=-1)


def _linear_taps(src_size, dst_size, edge_weights):
    """OpenCV's source indices and 11-bit weights along one axis.

    ``fx = (float)((d + 0.5) * scale - 0.5)`` with ``scale = 1 / (dst / src)`` in
    double; ``sx = floor(fx)``; weights ``round(2048 * (1 - (fx - sx)))`` and
    ``round(2048 * (fx - sx))`` (cvRound: half to even); the two taps ``sx`` and
    ``sx + 1`` are clipped into the image. Horizontally (``edge_weights=True``)
    OpenCV also sets the weights of taps outside the image to (2048, 0);
    vertically it keeps the computed weights on the clipped rows.
    """
    src = tf.cast(src_size, tf.float64)
    scale = 1.0 / (tf.cast(dst_size, tf.float64) / src)
    d = tf.cast(tf.range(dst_size), tf.float64)
    fx = tf.cast((d + 0.5) * scale - 0.5, tf.float32)
    sx = tf.math.floor(fx)
    frac = fx - sx
    sx = tf.cast(sx, tf.int32)
    last = tf.cast(src_size, tf.int32) - 1
    if edge_weights:
        frac = tf.where((sx < 0) | (sx >= last), tf.zeros_like(frac), frac)
    w0 = tf.cast(tf.round((1.0 - frac) * 2048.0), tf.int32)
    w1 = tf.cast(tf.round(frac * 2048.0), tf.int32)
    return tf.clip_by_value(sx, 0, last), tf.clip_by_value(sx + 1, 0, last), w0, w1


def resize_linear(image, height, width):
    """``cv::resize(image, Size(width, height), INTER_LINEAR)`` for uint8 (H, W, C)."""
    shape = tf.shape(image)

    def resize():
        x0, x1, a0, a1 = _linear_taps(shape[1], width, edge_weights=True)
        y0, y1, b0, b1 = _linear_taps(shape[0], height, edge_weights=False)
        pixels = tf.cast(image, tf.int32)
        rows = (tf.gather(pixels, x0, axis=1) * a0[None, :, None]
                + tf.gather(pixels, x1, axis=1) * a1[None, :, None])
        top = _shift(b0[:, None, None] * _shift(tf.gather(rows, y0, axis=0), 4), 16)
        bottom = _shift(b1[:, None, None] * _shift(tf.gather(rows, y1, axis=0), 4), 16)
        out = tf.clip_by_value(_shift(top + bottom + 2, 2), 0, 255)
        return tf.cast(out, tf.uint8)

    same = tf.logical_and(tf.equal(shape[0], height), tf.equal(shape[1], width))
    return tf.cond(same, lambda: tf.identity(image), resize)
