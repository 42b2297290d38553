"""Image decoding and resizing as Caffe's OpenCV calls do them.

``cv_resize_linear`` below is a loop-for-loop numpy port of OpenCV's 8-bit
INTER_LINEAR (imgproc/src/resize.cpp: the xofs/alpha tables of ``hal::resize``,
``HResizeLinear`` with its xmax edge loop, ``resizeGeneric_``'s clipped
source rows and ``VResizeLinear<uchar, int, short, FixedPtCast<...>>``), written
independently of the TensorFlow implementation it checks.
"""

import numpy as np
import pytest
import tensorflow as tf

from keras_caffe.importers.data import images
COEF = 2048  # INTER_RESIZE_COEF_SCALE


def _cv_round(value):
    return int(np.rint(np.float32(value)))  # cvRound: round half to even


def cv_resize_linear(src, dst_h, dst_w):
    src = np.asarray(src, np.uint8)
    h, w, cn = src.shape
    if (h, w) == (dst_h, dst_w):
        return src.copy()
    scale_x = 1.0 / (dst_w / w)
    scale_y = 1.0 / (dst_h / h)
    xofs, alpha, xmax = [], [], dst_w
    for dx in range(dst_w):
        fx = np.float32((dx + 0.5) * scale_x - 0.5)
        sx = int(np.floor(fx))
        fx = np.float32(fx - np.float32(sx))
        if sx < 0:
            fx, sx = np.float32(0), 0
        if sx + 1 >= w:
            xmax = min(xmax, dx)
            if sx >= w - 1:
                fx, sx = np.float32(0), w - 1
        xofs.append(sx)
        alpha.append((_cv_round(np.float32(np.float32(1.0) - fx) * COEF), _cv_round(fx * COEF)))
    rows = np.zeros((h, dst_w, cn), np.int64)
    for y in range(h):
        for dx in range(dst_w):
            sx = xofs[dx]
            for c in range(cn):
                if dx < xmax:
                    rows[y, dx, c] = (int(src[y, sx, c]) * alpha[dx][0]
                                      + int(src[y, sx + 1, c]) * alpha[dx][1])
                else:
                    rows[y, dx, c] = int(src[y, sx, c]) * COEF
    out = np.zeros((dst_h, dst_w, cn), np.uint8)
    for dy in range(dst_h):
        fy = np.float32((dy + 0.5) * scale_y - 0.5)
        sy = int(np.floor(fy))
        fy = np.float32(fy - np.float32(sy))
        b0, b1 = _cv_round(np.float32(np.float32(1.0) - fy) * COEF), _cv_round(fy * COEF)
        s0, s1 = rows[min(max(sy, 0), h - 1)], rows[min(max(sy + 1, 0), h - 1)]
        out[dy] = (((b0 * (s0 >> 4)) >> 16) + ((b1 * (s1 >> 4)) >> 16) + 2) >> 2
    return out


@pytest.mark.parametrize("src, dst", [((7, 9), (12, 5)), ((12, 10), (5, 4)), ((6, 8), (3, 4)),
                                      ((5, 5), (17, 13)), ((1, 6), (3, 2)), ((9, 1), (4, 3)),
                                      ((10, 12), (7, 12))])
@pytest.mark.parametrize("channels", [1, 3])
def test_resize_linear_is_opencv_fixed_point_bilinear(src, dst, channels):
    image = np.random.default_rng(sum(src) + channels).integers(0, 256, (*src, channels))
    image = image.astype(np.uint8)
    ours = images.resize_linear(tf.constant(image), *dst).numpy()
    np.testing.assert_array_equal(ours, cv_resize_linear(image, *dst))
    if min(src) > 1:  # TensorFlow's half-pixel bilinear differs by rounding only
        theirs = tf.image.resize(image.astype(np.float32), dst, antialias=False).numpy()
        assert np.abs(ours.astype(np.float32) - theirs).max() <= 1.0


def test_resize_by_exactly_half_is_opencv_area_average_and_same_size_is_a_copy():
    """OpenCV sends an exact 2x downscale to INTER_AREA: (a + b + c + d + 2) >> 2."""
    image = np.random.default_rng(3).integers(0, 256, (8, 6, 3)).astype(np.uint8)
    blocks = image.reshape(4, 2, 3, 2, 3).astype(np.int64).sum(axis=(1, 3))
    np.testing.assert_array_equal(images.resize_linear(tf.constant(image), 4, 3).numpy(),
                                  (blocks + 2) >> 2)
    np.testing.assert_array_equal(images.resize_linear(tf.constant(image), 8, 6).numpy(), image)


def test_decode_gives_opencv_channel_orders():
    rng = np.random.default_rng(5)
    rgb = rng.integers(0, 256, (4, 5, 3)).astype(np.uint8)
    png = tf.io.encode_png(rgb)
    np.testing.assert_array_equal(images.decode(png, "color").numpy(), rgb[:, :, ::-1])  # BGR
    np.testing.assert_array_equal(images.decode(png, "native").numpy(), rgb[:, :, ::-1])
    r, g, b = (rgb[..., i].astype(np.int64) for i in range(3))
    libpng = (9797 * r + 19234 * g + 3737 * b) >> 15  # png_set_rgb_to_gray(png, 1, .299, .587)
    np.testing.assert_array_equal(images.decode(png, "gray").numpy()[..., 0], libpng)
    gray = rng.integers(0, 256, (4, 5, 1)).astype(np.uint8)
    as_color = images.decode(tf.io.encode_png(gray), "color").numpy()
    np.testing.assert_array_equal(as_color, np.repeat(gray, 3, axis=2))  # IMREAD_COLOR
    np.testing.assert_array_equal(images.decode(tf.io.encode_png(gray), "native").numpy(), gray)
    rgba = rng.integers(0, 256, (4, 5, 4)).astype(np.uint8)
    np.testing.assert_array_equal(images.decode(tf.io.encode_png(rgba), "native").numpy(),
                                  rgba[:, :, [2, 1, 0, 3]])  # IMREAD_UNCHANGED: BGRA
    np.testing.assert_array_equal(images.decode(tf.io.encode_png(rgba), "color").numpy(),
                                  rgba[:, :, 2::-1])  # IMREAD_COLOR drops alpha


def test_decode_bmp_gray_uses_opencv_cvtcolor_and_jpeg_uses_the_accurate_dct():
    rng = np.random.default_rng(6)
    rgb = rng.integers(0, 256, (6, 4, 3)).astype(np.uint8)
    bmp = _bmp(rgb)
    np.testing.assert_array_equal(images.decode(bmp, "color").numpy(), rgb[:, :, ::-1])
    r, g, b = (rgb[..., i].astype(np.int64) for i in range(3))
    np.testing.assert_array_equal(images.decode(bmp, "gray").numpy()[..., 0],
                                  (4899 * r + 9617 * g + 1868 * b + 8192) >> 14)
    jpeg = tf.io.encode_jpeg(tf.constant(rgb), quality=90)
    accurate = tf.io.decode_jpeg(jpeg, dct_method="INTEGER_ACCURATE").numpy()
    np.testing.assert_array_equal(images.decode(jpeg, "color").numpy(), accurate[:, :, ::-1])
    assert bool(images.known_format(jpeg)) and not bool(images.known_format(b"plain text"))


def _bmp(rgb):
    """A 24-bit BMP file of an RGB image (rows bottom-up, BGR, 4-byte aligned)."""
    height, width, _ = rgb.shape
    stride = (width * 3 + 3) & ~3
    pixels = b"".join(rgb[y, :, ::-1].tobytes().ljust(stride, b"\0")
                      for y in reversed(range(height)))
    header = (b"BM" + (54 + len(pixels)).to_bytes(4, "little") + b"\0\0\0\0"
              + (54).to_bytes(4, "little") + (40).to_bytes(4, "little")
              + width.to_bytes(4, "little") + height.to_bytes(4, "little")
              + (1).to_bytes(2, "little") + (24).to_bytes(2, "little") + b"\0" * 24)
    return tf.constant(header + pixels)
