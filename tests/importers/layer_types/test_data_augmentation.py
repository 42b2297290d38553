"""DataAugmentation against a numpy port of FlowNet 2.0's (lmb-freiburg/flownet2):
``DataAugmentationLayer::adjust_blobs`` (src/caffe/layers/
data_augmentation_layer.cpp, how the weights are copied in) and the mean
subtraction of ``Forward_gpu`` (data_augmentation_layer.cu; the CPU forward
only aborts), which is all it does without cropping, as in FlowNet 2.0's
deploy nets."""

import numpy as np
import pytest
from keras import ops

from keras_caffe.errors import LayerError
from keras_caffe.importers import import_model, load_into
from keras_caffe.analysis import analyze
from support import DATA_FORMATS, run_layers, to_keras_layout
from support.layer_gradients import gradients

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)

F = np.float32


def adjust_blobs(given, shape, mean_per_pixel):
    """adjust_blobs (recompute_mean > 0): the count; with mean_per_pixel
    false the channel mean alone (the pixel mean stays 0); else the pixel
    mean (same size) or its area average spread (another size), and the
    channel mean its area average."""
    count, pixel, channel = (np.asarray(b, np.float64) for b in given)
    c, h, w = shape[1:]
    if not mean_per_pixel:
        return count, np.zeros((1, c, h, w)), channel.reshape(1, c, 1, 1)
    per_channel = pixel[0].reshape(c, -1).mean(axis=1).reshape(1, c, 1, 1)
    if pixel.shape[2:] != (h, w):
        pixel = np.broadcast_to(per_channel, (1, c, h, w))
    return count, pixel, per_channel


def augmentation_forward(x, recompute_mean, mean_per_pixel, blobs=None, proto_mean=()):
    """Forward_gpu without cropping: top = bottom; num_iter = count + 1; with
    recompute_mean, where num_iter <= recompute_mean the pixel mean becomes
    ((num_iter - 1) * mean + sum_n x[n] / num) / num_iter and the channel
    mean its area average; then the pixel or channel mean is subtracted.
    Without it, three mean values (mean_per_pixel false) per channel."""
    top = x.astype(np.float64)
    if recompute_mean > 0:
        count, pixel, channel = blobs
        num_iter = float(np.ravel(count)[0]) + 1
        if num_iter <= recompute_mean:
            pixel = pixel * (num_iter - 1)
            for item in x:
                pixel = pixel + item[None] / len(x)
            pixel = pixel / num_iter
            channel = pixel.mean(axis=(2, 3), keepdims=True)
        return top - (pixel if mean_per_pixel else channel)
    if len(proto_mean) == 3 and not mean_per_pixel:
        return top - np.reshape(proto_mean, (1, 3, 1, 1))
    return top


def aug_text(params, phase=""):
    return ('layer { name: "aug" type: "DataAugmentation" bottom: "data" top: "aug" '
            f"{phase} augmentation_param {{ {params} }} }}\n")


#: FlowNet 2.0's deploy nets' augmentation: no crop, random fields unused.
DEPLOY = ('augment_during_test: false recompute_mean: 1000 mean_per_pixel: false '
          'translate { rand_type: "uniform_bernoulli" exp: false mean: 0 spread: 0.4 prob: 1.0 } '
          'rotate { rand_type: "uniform_bernoulli" exp: false mean: 0 spread: 0.4 prob: 1.0 } '
          'noise { rand_type: "uniform_bernoulli" exp: false mean: 0.03 spread: 0.03 prob: 1.0 }')


def _blobs(rng, c, h, w, count):
    return [np.full((1, 1, 1, 1), count, F), rng.uniform(0, 1, (1, c, h, w)).astype(F),
            rng.uniform(0, 1, (1, c, 1, 1)).astype(F)]


@pytest.mark.layer_type("DataAugmentation")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("params, per_pixel, count, blob_size", [
    (DEPLOY, False, 1e6, (5, 6)),                          # trained: the stored channel mean
    ("recompute_mean: 1000", True, 1e6, (5, 6)),           # the stored pixel mean
    ("recompute_mean: 1000", True, 1e6, (8, 9)),           # trained on another size: spread
    ("recompute_mean: 10", True, 3, (5, 6)),               # still recomputing: batch folded in
    ("recompute_mean: 10 mean_per_pixel: false", False, 3, (5, 6)),  # pixel mean from 0
    ("recompute_mean: 4", True, 3, (5, 6)),                # the last recomputing forward
    ("recompute_mean: 3", True, 3, (5, 6)),                # one past: stored
])
def test_augmentation_mean_matches_the_fork(params, per_pixel, count, blob_size, data_format):
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (2, 3, 5, 6)).astype(F)
    given = _blobs(rng, 3, *blob_size, count)
    got = run_layers(aug_text(params), {"data": x}, {"aug": given}, data_format)["aug"]
    recompute = int(params.split("recompute_mean: ")[1].split()[0])
    blobs = adjust_blobs(given, x.shape, per_pixel)
    np.testing.assert_allclose(got, augmentation_forward(x, recompute, per_pixel, blobs),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.layer_type("DataAugmentation")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_augmentation_without_weights_subtracts_the_batch_mean(data_format):
    """The count starts at 0 (Reshape sets it): the first forward's mean is
    the batch's (OpenCV's importer always computes it so)."""
    x = np.random.default_rng(1).uniform(0, 1, (2, 3, 4, 5)).astype(F)
    got = run_layers(aug_text("recompute_mean: 1000 mean_per_pixel: false"), {"data": x},
                     data_format=data_format)["aug"]
    np.testing.assert_allclose(got, x - x.mean(axis=(0, 2, 3), keepdims=True), atol=1e-6)


@pytest.mark.layer_type("DataAugmentation")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("params, phase, mean", [
    ("mean: 0.4 mean: 0.5 mean: 0.6 mean_per_pixel: false", "", (0.4, 0.5, 0.6)),
    ("mean: 0.4 mean: 0.5 mean: 0.6", "", ()),             # per pixel: the fork ignores it
    ("", "", ()),
    # no crop: the fork augments nothing, in TRAIN or with augment_during_test
    ("augment_during_test: true max_multiplier: 1 " + DEPLOY.split("mean_per_pixel: false")[1],
     "", ()),
    ("mirror { rand_type: \"bernoulli\" prob: 0.5 } crop_width: 4", "phase: TRAIN", ()),
])
def test_augmentation_without_recompute(params, phase, mean, data_format):
    x = np.random.default_rng(2).uniform(0, 1, (2, 3, 4, 5)).astype(F)
    model_phase = "TRAIN" if phase else "TEST"
    got = run_layers(aug_text(params), {"data": x}, data_format=data_format,
                     phase=model_phase)["aug"]
    np.testing.assert_allclose(got, augmentation_forward(x, 0, not mean, proto_mean=mean),
                               atol=1e-6)


@pytest.mark.layer_type("DataAugmentation")
def test_augmentation_has_no_gradient():
    """AllowBackward is false: nothing flows to the bottom."""
    model = import_model('layer { name: "in" type: "Input" top: "data" input_param { shape { '
                         'dim: 1 dim: 3 dim: 2 dim: 2 } } }\n' + aug_text("recompute_mean: 5"))
    (gradient,), _ = gradients(lambda x: ops.sum(model(x)), [np.ones((1, 2, 2, 3), F)])
    assert gradient is None or not np.any(gradient)


@pytest.mark.layer_type("DataAugmentation")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_augmentation_blobs_and_analyze(data_format):
    text = ('layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 '
            'dim: 4 dim: 5 } } }\n' + aug_text(DEPLOY))
    row = analyze(text).layers[-1]
    assert row.weight_shapes == ((1, 1, 1, 1), (1, 3, 4, 5), (1, 3, 1, 1))
    model = import_model(text, data_format=data_format)
    layer = model.get_layer("aug")
    assert layer.caffe_blob_shapes() == [(1, 1, 1, 1), (1, 3, 4, 5), (1, 3, 1, 1)]
    rng = np.random.default_rng(3)
    given = _blobs(rng, 3, 4, 5, 5000)
    load_into(model, {"aug": given})
    x = rng.uniform(0, 1, (1, 3, 4, 5)).astype(F)
    got = ops.convert_to_numpy(model(to_keras_layout(x, data_format)))
    if data_format == "channels_last":
        got = np.moveaxis(got, -1, 1)
    np.testing.assert_allclose(got, x - given[2], atol=1e-6)
    one = analyze('layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 1 '
                  'dim: 3 dim: 4 dim: 5 } } }\n' + aug_text("")).layers[-1]
    assert one.weight_shapes == ((1, 1, 1, 1),)


def _refused(params, message, shape=(1, 3, 4, 5), tops=("aug",)):
    text = ('layer { name: "aug" type: "DataAugmentation" bottom: "data" '
            + "".join(f'top: "{t}" ' for t in tops) + f"augmentation_param {{ {params} }} }}\n")
    with pytest.raises(LayerError, match="^layer 'aug': " + message + "$"):
        run_layers(text, {"data": np.zeros(shape, F)})


@pytest.mark.layer_type("DataAugmentation")
@pytest.mark.parametrize("params, message, shape, tops", [
    ("crop_width: 4 crop_height: 3 " + DEPLOY,
     r"\(DataAugmentation\) crop_width and crop_height \(cropping, where the fork augments\) are "
     r"not modelled", (1, 3, 4, 5), ("aug",)),
    ("recompute_mean: 10", r"\(DataAugmentation\) names 2 tops; the second \(the augmentation "
                           r"coefficients\) is not modelled", (1, 3, 4, 5), ("aug", "params")),
    ("mean: 1 mean: 2 mean: 3 mean_per_pixel: false",
     r"\(DataAugmentation\) mean has 3 values \(one per channel\) but the bottom \(1, 4, 4, 5\) "
     r"has 4 channels", (1, 4, 4, 5), ("aug",)),
    ("", r"\(DataAugmentation\) needs a 4-D bottom \(N, C, H, W\), got \(1, 3, 4\)", (1, 3, 4),
     ("aug",)),
])
def test_augmentation_bad_parameters(params, message, shape, tops):
    _refused(params, message, shape, tops)
