"""SSD's PriorBox against a numpy port of the fork's C++ (weiliu89/caffe,
branch ssd, src/caffe/layers/prior_box_layer.cpp: ``PriorBoxLayer::
LayerSetUp`` for the parameters, ``PriorBoxLayer::Forward_cpu`` for the top).
"""

import math

import keras
import numpy as np
import pytest

from keras_caffe.errors import LayerError
from keras_caffe.importers import import_model
from keras_caffe.analysis import analyze
from keras_caffe.layers.ssd import PriorBox
from support import DATA_FORMATS, run_layers, to_keras_layout
from support.layer_gradients import gradients, no_gradient

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)


def prior_box_reference(layer_hw, image_hw, min_size, max_size=(), aspect_ratio=(), flip=True,
                        clip=False, variance=(), img_size=None, img_h=None, img_w=None,
                        step=None, step_h=None, step_w=None, offset=0.5):
    """PriorBoxLayer::LayerSetUp + Forward_cpu, loop for loop: the top
    ``(1, 2, H * W * num_priors * 4)``. Float32 where the fork stores floats
    (``min_sizes_``, ``aspect_ratios_``, step, centres, box sizes, the top),
    double where it computes with ``2.`` or ``sqrt``; ``int min_size_``."""
    f32 = np.float32
    min_sizes = [f32(s) for s in min_size]
    max_sizes = [f32(s) for s in max_size]
    ratios = [f32(1.0)]
    for ar in aspect_ratio:
        ar = f32(ar)
        if any(abs(ar - r) < 1e-6 for r in ratios):
            continue
        ratios.append(ar)
        if flip:
            ratios.append(f32(1.0 / float(ar)))
    num_priors = len(ratios) * len(min_sizes) + len(max_sizes)
    variances = [f32(v) for v in variance] or [f32(0.1)]
    if img_h is not None or img_w is not None:
        img_height, img_width = img_h, img_w
    elif img_size is not None:
        img_height = img_width = img_size
    else:
        img_height, img_width = image_hw
    layer_h, layer_w = layer_hw
    if step_h is not None or step_w is not None:
        sh, sw = f32(step_h), f32(step_w)
    elif step is not None:
        sh = sw = f32(step)
    else:
        sw = f32(f32(img_width) / f32(layer_w))
        sh = f32(f32(img_height) / f32(layer_h))
    dim = layer_h * layer_w * num_priors * 4
    top = np.zeros((2, dim), np.float32)
    idx = 0

    def put(cx, cy, bw, bh):
        nonlocal idx
        for value in ((float(cx) - float(bw) / 2.0) / img_width,
                      (float(cy) - float(bh) / 2.0) / img_height,
                      (float(cx) + float(bw) / 2.0) / img_width,
                      (float(cy) + float(bh) / 2.0) / img_height):
            top[0, idx] = f32(value)
            idx += 1

    for h in range(layer_h):
        for w in range(layer_w):
            center_x = f32(f32(w + f32(offset)) * sw)
            center_y = f32(f32(h + f32(offset)) * sh)
            for s in range(len(min_sizes)):
                min_size_ = int(min_sizes[s])
                put(center_x, center_y, f32(min_size_), f32(min_size_))
                if max_sizes:
                    max_size_ = int(max_sizes[s])
                    side = f32(math.sqrt(min_size_ * max_size_))
                    put(center_x, center_y, side, side)
                for ar in ratios:
                    if abs(float(ar) - 1.0) < 1e-6:
                        continue
                    put(center_x, center_y, f32(min_size_ * math.sqrt(float(ar))),
                        f32(min_size_ / math.sqrt(float(ar))))
    assert idx == dim
    if clip:
        top[0] = np.minimum(np.maximum(top[0], 0.0), 1.0)
    if len(variances) == 1:
        top[1] = variances[0]
    else:
        for i in range(dim // 4):
            top[1, 4 * i:4 * i + 4] = variances
    return top[None]


def prior_layer(params, bottoms=("feat", "data")):
    return ('layer { name: "prior" type: "PriorBox" '
            + "".join(f'bottom: "{b}" ' for b in bottoms)
            + f'top: "prior" prior_box_param {{ {params} }} }}\n')


def run_prior(params, feature_shape, image_shape, data_format, bottoms=("feat", "data")):
    rng = np.random.default_rng(0)
    inputs = {"feat": rng.standard_normal(feature_shape).astype(np.float32)}
    if image_shape is not None:
        inputs["data"] = rng.standard_normal(image_shape).astype(np.float32)
    return run_layers(prior_layer(params, bottoms), inputs, data_format=data_format,
                      outputs=["prior"])["prior"]


CASES = [
    # MobileNet-SSD's first PriorBox: min_size, one ratio flipped, 4 variances.
    ("min_size: 60 aspect_ratio: 2 flip: true clip: false variance: 0.1 variance: 0.1 "
     "variance: 0.2 variance: 0.2 offset: 0.5",
     dict(min_size=[60], aspect_ratio=[2], variance=[0.1, 0.1, 0.2, 0.2]), (5, 5), (300, 300)),
    # Repeated min/max sizes, two ratios flipped, clip, one variance.
    ("min_size: 30 min_size: 45 max_size: 60 max_size: 90 aspect_ratio: 2 aspect_ratio: 3 "
     "clip: true variance: 0.2",
     dict(min_size=[30, 45], max_size=[60, 90], aspect_ratio=[2, 3], clip=True,
          variance=[0.2]), (4, 6), (40, 70)),
    # img_size and step given, offset 0, no variance (default 0.1).
    ("min_size: 16 max_size: 33 aspect_ratio: 0.5 img_size: 64 step: 16 offset: 0",
     dict(min_size=[16], max_size=[33], aspect_ratio=[0.5], img_size=64, step=16, offset=0),
     (4, 4), (50, 50)),
    # img_h/img_w, step_h/step_w, a fractional min_size (truncated to 22, max to 40),
    # duplicate ratios (2 then 2.0000001; 0.5 repeats 1/2), no flip.
    ("min_size: 22.7 max_size: 40.9 aspect_ratio: 2 aspect_ratio: 2.0000001 aspect_ratio: 0.5 "
     "flip: false img_h: 90 img_w: 120 step_h: 30 step_w: 20 offset: 0.25",
     dict(min_size=[22.7], max_size=[40.9], aspect_ratio=[2, 2.0000001, 0.5], flip=False,
          img_h=90, img_w=120, step_h=30, step_w=20, offset=0.25), (3, 6), (33, 44)),
    # Duplicates with flip: 0.5 equals the flipped 2 and is dropped.
    ("min_size: 10 aspect_ratio: 2 aspect_ratio: 0.5 aspect_ratio: 1 step: 7.5",
     dict(min_size=[10], aspect_ratio=[2, 0.5, 1], step=7.5), (3, 2), (23, 17)),
]


@pytest.mark.layer_type("PriorBox")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("params, kwargs, layer_hw, image_hw", CASES)
def test_prior_box_matches_the_fork(data_format, params, kwargs, layer_hw, image_hw):
    got = run_prior(params, (3, 2, *layer_hw), (3, 3, *image_hw), data_format)
    want = prior_box_reference(layer_hw, image_hw, **kwargs)
    assert got.shape == (3, *want.shape[1:])  # broadcast to the batch
    for sample in got:
        np.testing.assert_allclose(sample, want[0], rtol=0, atol=1e-7)


@pytest.mark.layer_type("PriorBox")
def test_prior_box_truncates_sizes_and_drops_duplicate_ratios():
    want = prior_box_reference((1, 1), (100, 100), [22.7], [40.9], [2, 2.0000001, 0.5],
                               flip=False)
    # 3 priors: 22 (not 22.7), sqrt(22 * 40), then ratio 2 and 0.5 (2.0000001 dropped).
    np.testing.assert_allclose(want[0, 0, :4], [0.5 - 0.11, 0.5 - 0.11, 0.5 + 0.11, 0.5 + 0.11],
                               atol=1e-7)
    side = math.sqrt(22 * 40) / 200
    np.testing.assert_allclose(want[0, 0, 4:8], [0.5 - side, 0.5 - side, 0.5 + side, 0.5 + side],
                               atol=1e-7)
    assert want.shape == (1, 2, 4 * 4)
    got = run_prior("min_size: 22.7 max_size: 40.9 aspect_ratio: 2 aspect_ratio: 2.0000001 "
                    "aspect_ratio: 0.5 flip: false", (1, 1, 1, 1), (1, 1, 100, 100),
                    "channels_first")
    np.testing.assert_allclose(got, want, atol=1e-7)


@pytest.mark.layer_type("PriorBox")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_one_bottom_with_img_size(data_format):
    """The fork declares ``ExactBottomBlobs`` (a typo for ``ExactNumBottomBlobs``):
    one bottom works when the image size is given."""
    got = run_prior("min_size: 8 img_size: 32", (1, 4, 4, 4), None, data_format,
                    bottoms=("feat",))
    np.testing.assert_allclose(got, prior_box_reference((4, 4), None, [8], img_size=32),
                               atol=1e-7)


@pytest.mark.layer_type("PriorBox")
def test_prior_box_is_a_constant_of_the_shapes():
    text = ('layer { name: "in" type: "Input" top: "feat" top: "data" input_param { '
            'shape { dim: 1 dim: 2 dim: 3 dim: 3 } shape { dim: 1 dim: 3 dim: 30 dim: 30 } } }\n'
            + prior_layer("min_size: 10 max_size: 20 aspect_ratio: 2"))
    model = import_model(text, data_format="channels_first")
    rng = np.random.default_rng(1)
    feeds = [[rng.standard_normal((2, 2, 3, 3)).astype(np.float32),
              rng.standard_normal((2, 3, 30, 30)).astype(np.float32)] for _ in range(2)]
    first, second = (keras.ops.convert_to_numpy(model(f)) for f in feeds)
    np.testing.assert_array_equal(first, second)
    (grad, _), _ = gradients(lambda *f: keras.ops.sum(model(list(f))), feeds[0])
    assert no_gradient(grad)  # no gradient (the fork's Backward is empty)
    row = [r for r in analyze(text).layers if r.name == "prior"][0]
    assert row.tops == (("prior", (1, 2, 3 * 3 * 4 * 4)),)
    assert row.weight_shapes == () and row.forward_flops == 0


@pytest.mark.layer_type("PriorBox")
def test_keras_layer_round_trips_its_config():
    layer = PriorBox([30, 45], [60, 90], [2, 3], clip=True, variances=[0.1, 0.1, 0.2, 0.2],
                     step=(8, 8), offset=0.25, data_format="channels_last")
    clone = PriorBox.from_config(layer.get_config())
    feat = np.zeros((2, 4, 5, 3), np.float32)
    image = to_keras_layout(np.zeros((2, 3, 32, 40), np.float32), "channels_last")
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer([feat, image])),
                                  keras.ops.convert_to_numpy(clone([feat, image])))
    assert layer.compute_output_shape([(None, 4, 5, 3), (None, 32, 40, 3)]) == (
        None, 2, 4 * 5 * 12 * 4)  # (5 ratios + 1 max size) per min size


@pytest.mark.layer_type("PriorBox")
@pytest.mark.parametrize("params, bottoms, message", [
    ("flip: true", None, "min_size is required"),
    ("min_size: 0", None, r"min_size must be positive, got \[0.0\]"),
    ("min_size: 10 min_size: 20 max_size: 30", None,
     r"max_size must be given once per min_size \(2\), got 1"),
    ("min_size: 10 max_size: 10", None, "max_size 10 must be greater than min_size 10"),
    ("min_size: 10 aspect_ratio: 0", None, r"aspect_ratio must be positive, got \[0.0\]"),
    ("min_size: 10 variance: 0.1 variance: 0.2", None, "variance takes 1 or 4 values, got 2"),
    ("min_size: 10 variance: 0", None, r"variance must be positive, got \[0.0\]"),
    ("min_size: 10 img_size: 30 img_h: 30 img_w: 30", None,
     "give either img_size or img_h/img_w, not both"),
    ("min_size: 10 img_h: 30", None,
     "img_h and img_w must both be positive, got img_h 30, img_w 0"),
    ("min_size: 10 img_size: 0", None, "img_size must be positive"),
    ("min_size: 10 step: 8 step_h: 8 step_w: 8", None,
     "give either step or step_h/step_w, not both"),
    ("min_size: 10 step_h: 8", None, "step_h and step_w must both be positive, got step_h 8, "
                                     "step_w 0"),
    ("min_size: 10 step: -1", None, "step must be positive, got -1"),
    ("min_size: 10", ("feat",), r"takes the feature map and the image \(2 bottoms\), got 1"),
    ("min_size: 10", ("flat", "data"), r"needs a 4-D feature map \(N, C, H, W\), got \(1, 8\)"),
])
def test_bad_parameters_are_refused(params, bottoms, message):
    text = ('layer { name: "in" type: "Input" top: "feat" top: "data" top: "flat" input_param { '
            'shape { dim: 1 dim: 2 dim: 3 dim: 3 } shape { dim: 1 dim: 3 dim: 30 dim: 30 } '
            'shape { dim: 1 dim: 8 } } }\n' + prior_layer(params, bottoms or ("feat", "data")))
    with pytest.raises(LayerError, match=r"^layer 'prior': \(PriorBox\) " + message):
        import_model(text)
    with pytest.raises(LayerError, match=r"^layer 'prior': \(PriorBox\) " + message):
        analyze(text)
