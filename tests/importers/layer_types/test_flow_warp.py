"""FlowWarp against a numpy port of FlowNet 2.0's (lmb-freiburg/flownet2,
src/caffe/layers/flow_warp_layer.cpp): ``FlowWarpLayer::Forward_cpu`` for the
values (float32 as the fork computes them) and ``Backward_cpu`` for the
gradients of the image and the flow."""

import numpy as np
import pytest

from keras_caffe.errors import LayerError
from keras_caffe.importers import import_model
from support import DATA_FORMATS, from_keras_layout, run_layers, to_keras_layout
from support.layer_gradients import gradients, weighted_sum

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)

F = np.float32


def _sample(width, height, x, y, fx, fy):
    """Forward_cpu's (x2, y2), inside test, corners and weights."""
    x2 = F(F(x) + F(fx))
    y2 = F(F(y) + F(fy))
    if not (x2 >= 0 and y2 >= 0 and x2 < width and y2 < height):
        return None
    left, top = int(x2), int(y2)
    right, bottom = min(left + 1, width - 1), min(top + 1, height - 1)
    return x2, y2, left, top, right, bottom, F(x2 - F(left)), F(y2 - F(top))


def warp_forward(image, flow, fill=0.0):
    """Forward_cpu: for each (x, y) the image at (x + fx, y + fy), bilinear;
    outside [0, W) x [0, H) the fill value."""
    n, c, height, width = image.shape
    top = np.empty_like(image)
    for item in range(n):
        for x in range(width):
            for y in range(height):
                s = _sample(width, height, x, y, flow[item, 0, y, x], flow[item, 1, y, x])
                if s is None:
                    top[item, :, y, x] = fill
                    continue
                _, _, left, up, right, down, alpha, beta = s
                im = image[item]
                top[item, :, y, x] = ((F(1) - alpha) * (F(1) - beta) * im[:, up, left]
                                      + alpha * (F(1) - beta) * im[:, up, right]
                                      + (F(1) - alpha) * beta * im[:, down, left]
                                      + alpha * beta * im[:, down, right])
    return top


def warp_backward(image, flow, top_diff):
    """Backward_cpu: the image's diff (the adjoint of the sampling) and the
    flow's (the derivative of the bilinear sample along x and y)."""
    n, c, height, width = image.shape
    image_diff = np.zeros(image.shape, np.float64)
    flow_diff = np.zeros(flow.shape, np.float64)
    for item in range(n):
        im = image[item].astype(np.float64)
        for x in range(width):
            for y in range(height):
                s = _sample(width, height, x, y, flow[item, 0, y, x], flow[item, 1, y, x])
                if s is None:
                    continue
                x2, y2, left, up, right, down, alpha, beta = s
                g = top_diff[item, :, y, x]
                image_diff[item, :, up, left] += g * (1 - alpha) * (1 - beta)
                image_diff[item, :, up, right] += g * alpha * (1 - beta)
                image_diff[item, :, down, left] += g * (1 - alpha) * beta
                image_diff[item, :, down, right] += g * alpha * beta
                gamma = down - y2
                flow_diff[item, 0, y, x] = np.sum(g * (gamma * (im[:, up, right] - im[:, up, left])
                                                       + (1 - gamma) * (im[:, down, right]
                                                                        - im[:, down, left])))
                gamma = right - x2
                flow_diff[item, 1, y, x] = np.sum(g * (gamma * (im[:, down, left] - im[:, up, left])
                                                       + (1 - gamma) * (im[:, down, right]
                                                                        - im[:, up, right])))
    return image_diff, flow_diff


def warp_text(params=""):
    return ('layer { name: "warp" type: "FlowWarp" bottom: "image" bottom: "flow" top: "warp" '
            + params + " }\n")


def _flow(rng, shape, scale):
    return (rng.standard_normal(shape) * scale).astype(F)


@pytest.mark.layer_type("FlowWarp")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("scale, size", [(0.7, (5, 6)), (3.0, (7, 5)), (1.5, (1, 6)),
                                         (1.5, (6, 1))])
def test_flow_warp_matches_the_fork(scale, size, data_format):
    """Small and large flows (many points outside), odd sizes, one row or
    one column (the clamped neighbours)."""
    rng = np.random.default_rng(0)
    image = rng.standard_normal((2, 3, *size)).astype(F)
    flow = _flow(rng, (2, 2, *size), scale)
    got = run_layers(warp_text(), {"image": image, "flow": flow},
                     data_format=data_format)["warp"]
    np.testing.assert_allclose(got, warp_forward(image, flow), rtol=1e-5, atol=1e-6)


@pytest.mark.layer_type("FlowWarp")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_flow_warp_border_cases(data_format):
    """Exactly on the last row/column (inside, neighbours clamped), just past
    it and just before 0 (outside: the fill), whole-pixel shifts, NaN flow
    (outside), with fill_value NOT_A_NUMBER."""
    image = np.arange(2 * 4 * 5, dtype=F).reshape(1, 2, 4, 5)
    flow = np.zeros((1, 2, 4, 5), F)
    flow[0, 0, 0, 0], flow[0, 1, 0, 0] = 4.0, 3.0          # lands on (4, 3): the last pixel
    flow[0, 0, 0, 1] = 3.0 + 0.5                           # x2 = 4.5: inside, right clamped
    flow[0, 0, 0, 2] = 3.0                                 # x2 = 5.0 = W: outside
    flow[0, 0, 1, 0] = -1e-3                               # x2 < 0: outside
    flow[0, 1, 1, 1] = np.nan                              # NaN: outside
    flow[0, 0, 2, 2], flow[0, 1, 2, 2] = -2.0, 1.0         # a whole-pixel shift
    flow[0, 1, 3, 3] = 0.25                                # y2 = 3.25: bottom clamped
    got = run_layers(warp_text("flow_warp_param { fill_value: NOT_A_NUMBER }"),
                     {"image": image, "flow": flow}, data_format=data_format)["warp"]
    expected = warp_forward(image, flow, fill=np.nan)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    assert np.isnan(expected[0, :, 0, 2]).all() and np.isnan(expected[0, :, 1, 0]).all()
    assert np.isnan(expected[0, :, 1, 1]).all()
    np.testing.assert_allclose(got[~np.isnan(got)], expected[~np.isnan(expected)], rtol=1e-6)
    zero = run_layers(warp_text(), {"image": image, "flow": flow},
                      data_format=data_format)["warp"]
    np.testing.assert_allclose(zero, warp_forward(image, flow, fill=0.0), rtol=1e-6)


@pytest.mark.layer_type("FlowWarp")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_flow_warp_gradient_is_the_forks(data_format):
    rng = np.random.default_rng(1)
    image = rng.standard_normal((2, 3, 5, 6)).astype(F)
    flow = _flow(rng, (2, 2, 5, 6), 1.3)
    cotangent = rng.standard_normal(image.shape).astype(F)
    text = ('layer { name: "in" type: "Input" top: "image" top: "flow" input_param { '
            'shape { dim: 2 dim: 3 dim: 5 dim: 6 } shape { dim: 2 dim: 2 dim: 5 dim: 6 } } }\n'
            + warp_text())
    model = import_model(text, data_format=data_format)
    top = to_keras_layout(cotangent, data_format)
    grads, _ = gradients(lambda *feeds: weighted_sum(model(list(feeds)), top),
                         [to_keras_layout(v, data_format) for v in (image, flow)])
    got_image, got_flow = (from_keras_layout(g, data_format) for g in grads)
    want_image, want_flow = warp_backward(image, flow, cotangent)
    np.testing.assert_allclose(got_image, want_image, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_flow, want_flow, rtol=1e-4, atol=1e-4)


def _refused(shapes, message, params=""):
    inputs = {name: np.zeros(s, F) for name, s in zip(("image", "flow"), shapes)}
    text = ('layer { name: "warp" type: "FlowWarp" '
            + "".join(f'bottom: "{b}" ' for b in inputs) + f'top: "warp" {params} }}\n')
    with pytest.raises(LayerError, match="^layer 'warp': " + message + "$"):
        run_layers(text, inputs)


@pytest.mark.layer_type("FlowWarp")
@pytest.mark.parametrize("shapes, message", [
    (((1, 3, 4, 5), (1, 3, 4, 5)), r"\(FlowWarp\) the flow must be \(N, 2, H, W\) for the "
                                   r"image \(1, 3, 4, 5\), got \(1, 3, 4, 5\)"),
    (((1, 3, 4, 5), (1, 2, 4, 6)), r"\(FlowWarp\) the flow must be \(N, 2, H, W\) for the "
                                   r"image \(1, 3, 4, 5\), got \(1, 2, 4, 6\)"),
    (((1, 3, 4, 5),), r"\(FlowWarp\) takes 2 bottom\(s\), got 1"),
    (((1, 3, 4), (1, 2, 4)), r"\(FlowWarp\) needs 4-D bottoms \(N, C, H, W\), got \(1, 3, 4\) "
                             r"and \(1, 2, 4\)"),
])
def test_flow_warp_bad_bottoms(shapes, message):
    _refused(shapes, message)
