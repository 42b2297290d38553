"""Resample against a numpy port of FlowNet 2.0's (lmb-freiburg/flownet2):
``ResampleLayer::Reshape`` (src/caffe/layers/resample_layer.cpp) for the
size, and, as its ``Forward_cpu`` only aborts, its CUDA kernels
(src/caffe/layers/resample_layer.cu ``NearestNeighborKernel`` and
``InterpolationKernel``, with ``Forward_gpu``'s factors and filter choice),
looped per output pixel as the kernels are."""

import math

import numpy as np
import pytest

from keras_caffe.errors import LayerError
from keras_caffe.analysis import analyze
from support import DATA_FORMATS, run_layers

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)

F = np.float32


def _c_round(v):
    return int(math.copysign(math.floor(abs(float(v)) + 0.5), float(v)))


def _bicubic(x):
    x = abs(F(x))
    if x <= 1:
        return x * x * (F(1.5) * x - F(2.5)) + F(1)
    if x < 2:
        return x * (x * (F(-0.5) * x + F(2.5)) - F(4)) + F(2)
    return F(0)


def _triangle(x):
    if -1 <= x < 0:
        return x + F(1)
    if 0 <= x <= 1:
        return F(1) - x
    return F(0)


def resample_forward(x, out_h, out_w, kind, antialias_param):
    """Forward_gpu + the kernels: f = in / out; the source position of
    (x, y) is (x * fx + fy / 2 - 0.5, y * fy + fx / 2 - 0.5); NEAREST reads
    the flat index at the rounded position; LINEAR/CUBIC sum w * v / sum w
    over the taps round +- r inside the input (0 where sum w is 0)."""
    n, c, in_h, in_w = x.shape
    fx, fy = F(in_w) / F(out_w), F(in_h) / F(out_h)
    planes = x.reshape(n * c, in_h * in_w)
    top = np.zeros((n * c, out_h, out_w), F)
    antialias = (fx > 1 or fy > 1) and antialias_param
    kernel, width = (_bicubic, 4) if kind == "cubic" else (_triangle, 2)
    ax = F(1) / (fx if antialias else F(1))
    ay = F(1) / (fy if antialias else F(1))
    rx = 2 if fx < 1 else math.ceil(F(width) / ax)
    ry = 2 if fy < 1 else math.ceil(F(width) / ay)
    for cn in range(n * c):
        for yo in range(out_h):
            for xo in range(out_w):
                x_in = F(F(xo) * fx + fy / F(2) - F(0.5))
                y_in = F(F(yo) * fy + fx / F(2) - F(0.5))
                xr, yr = _c_round(x_in), _c_round(y_in)
                if kind == "nearest":
                    top[cn, yo, xo] = planes[cn, yr * in_w + xr]
                    continue
                total = weights = 0.0
                for y in range(yr - ry, yr + ry + 1):
                    for xx in range(xr - rx, xr + rx + 1):
                        if y < 0 or xx < 0 or y >= in_h or xx >= in_w:
                            continue
                        w = (ax * kernel(ax * F(x_in - F(xx)))
                             * ay * kernel(ay * F(y_in - F(y))))
                        total += w * planes[cn, y * in_w + xx]
                        weights += w
                top[cn, yo, xo] = 0 if not weights else total / weights
    return top.reshape(n, c, out_h, out_w)


def resample_text(params, bottoms=("data",)):
    return ('layer { name: "rs" type: "Resample" ' + "".join(f'bottom: "{b}" ' for b in bottoms)
            + f'top: "rs" resample_param {{ {params} }} }}\n')


CASES = {
    # params, input (h, w), output (h, w), kind, antialias
    "nearest_up_2": ("width: 10 height: 8 type: NEAREST", (4, 5), (8, 10), "nearest", True),
    "nearest_down_2": ("width: 3 height: 4 type: NEAREST", (8, 6), (4, 3), "nearest", True),
    "nearest_odd": ("width: 7 height: 5 type: NEAREST", (3, 4), (5, 7), "nearest", True),
    # the x position takes the height's half factor: columns past the row end
    # read the next row's pixels, as the kernel's flat index does
    "nearest_aspect": ("width: 8 height: 2 type: NEAREST", (8, 2), (2, 8), "nearest", True),
    "linear_up": ("width: 9 height: 7 type: LINEAR antialias: false", (4, 5), (7, 9),
                  "linear", False),
    "linear_down": ("width: 3 height: 4 type: LINEAR antialias: false", (9, 7), (4, 3),
                    "linear", False),
    "linear_down_antialias": ("width: 3 height: 4 type: LINEAR", (9, 7), (4, 3), "linear", True),
    "linear_mixed_antialias": ("width: 11 height: 3 type: LINEAR antialias: true", (7, 5),
                               (3, 11), "linear", True),
    "linear_same": ("width: 5 height: 4 type: LINEAR", (4, 5), (4, 5), "linear", True),
    # FlowNet 2.0's deploy nets: back from the size divisible by 64
    "flownet2_like": ("width: 10 height: 7 type: LINEAR antialias: true", (8, 12), (7, 10),
                      "linear", True),
    # positions beyond the filter's reach: no weight, 0
    "linear_no_weight": ("width: 8 height: 2 type: LINEAR antialias: false", (8, 2), (2, 8),
                         "linear", False),
    "cubic_up": ("width: 9 height: 8 type: CUBIC antialias: false", (4, 5), (8, 9), "cubic",
                 False),
    "cubic_down_antialias": ("width: 4 height: 3 type: CUBIC", (9, 10), (3, 4), "cubic", True),
}


@pytest.mark.layer_type("Resample")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", list(CASES))
def test_resample_matches_the_fork(case, data_format):
    params, (h, w), size, kind, antialias = CASES[case]
    x = np.random.default_rng(0).standard_normal((2, 3, h, w)).astype(F)
    got = run_layers(resample_text(params), {"data": x}, data_format=data_format)["rs"]
    expected = resample_forward(x, *size, kind, antialias)
    assert got.shape == expected.shape == (2, 3, *size)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    if case == "linear_no_weight":
        assert (expected[:, :, :, -1] == 0).all()


@pytest.mark.layer_type("Resample")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_resample_second_bottom_gives_the_size(data_format):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 4, 6)).astype(F)
    ref = rng.standard_normal((2, 1, 7, 9)).astype(F)
    got = run_layers(resample_text("type: LINEAR antialias: false", ("data", "ref")),
                     {"data": x, "ref": ref}, data_format=data_format)["rs"]
    np.testing.assert_allclose(got, resample_forward(x, 7, 9, "linear", False), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.layer_type("Resample")
def test_resample_in_analyze():
    text = ('layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 1 dim: 2 '
            'dim: 448 dim: 1024 } } }\n' + resample_text("width: 1024 height: 436"))
    row = analyze(text).layers[-1]
    assert row.tops == (("rs", (1, 2, 436, 1024)),)


def _refused(params, message, shape=(1, 2, 5, 5)):
    with pytest.raises(LayerError, match="^layer 'rs': " + message + "$"):
        run_layers(resample_text(params), {"data": np.zeros(shape, F)})


@pytest.mark.layer_type("Resample")
@pytest.mark.parametrize("params, message, shape", [
    ("width: 4 height: 4 type: AREA", r"\(Resample\) type AREA is not supported \(the fork has "
                                      r"NEAREST, LINEAR and CUBIC\)", (1, 2, 5, 5)),
    ("width: 4 height: 4 factor: 2", r"\(Resample\) factor 2 is read by nothing in the fork; "
                                     r"give width and height \(or a second bottom\)",
     (1, 2, 5, 5)),
    ("type: LINEAR", r"\(Resample\) height and width must be positive, got 0 and 0",
     (1, 2, 5, 5)),
    ("width: 4 height: 4", r"\(Resample\) needs a 4-D bottom \(N, C, H, W\), got \(1, 2, 5\)",
     (1, 2, 5)),
    ("width: 1 height: 4 type: NEAREST", r"\(Resample\) NEAREST from \(2, 2\) to \(4, 1\) reads "
                                         r"outside the input in the fork \(its x position uses "
                                         r"the height's factor\)", (1, 2, 2, 2)),
])
def test_resample_bad_parameters(params, message, shape):
    _refused(params, message, shape)
