"""A FlowNetC-style deploy net (data/flownetc_tiny_deploy.prototxt, written
from the FlowNet 2.0 fork's layer definitions: lmb-freiburg/flownet2) imports
and runs forward as a numpy run of the same net with the same random weights:
the FlowNet 2.0 layers by the numpy ports of the fork's code in their own
test files, the BVLC layers (Power, Convolution, leaky ReLU, Concat) by
numpy here."""

import keras
import numpy as np
import pytest

from keras_caffe.importers import import_model, load_into
from keras_caffe.analysis import analyze
from support import DATA_FORMATS, NETS, from_keras_layout, to_keras_layout
from importers.layer_types.test_accum import accum_forward
from importers.layer_types.test_correlation import correlation_reference
from importers.layer_types.test_data_augmentation import adjust_blobs, augmentation_forward
from importers.layer_types.test_flow_warp import warp_forward
from importers.layer_types.test_resample import resample_forward

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)

NET = NETS / "flownetc_tiny_deploy.prototxt"
F = np.float32


def conv(x, w, b, stride=1, pad=0):
    """Caffe's Convolution (group 1): cross-correlation over the zero-padded input."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    padded = np.zeros((n, c, h + 2 * pad, wd + 2 * pad))
    padded[:, :, pad:pad + h, pad:pad + wd] = x
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, o, oh, ow))
    for u in range(kh):
        for v in range(kw):
            patch = padded[:, :, u:u + stride * (oh - 1) + 1:stride,
                           v:v + stride * (ow - 1) + 1:stride]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, u, v])
    return out + b[None, :, None, None]


def leaky(x):
    return np.where(x > 0, x, 0.1 * x)


def weights(rng):
    def aug(c, h, w):
        return [np.full((1, 1, 1, 1), 1e6, F), rng.uniform(0.3, 0.6, (1, c, h, w)).astype(F),
                rng.uniform(0.3, 0.6, (1, c, 1, 1)).astype(F)]

    def normal(*shape, scale):
        return (rng.standard_normal(shape) * scale).astype(F)

    return {
        # trained on another size than the deploy net's: adjust_blobs spreads it
        "img0s_aug": aug(3, 32, 40), "img1s_aug": aug(3, 18, 22),
        "conv1": [normal(8, 3, 3, 3, scale=0.5), normal(8, scale=0.1)],
        "conv_redir": [normal(4, 8, 1, 1, scale=0.5), normal(4, scale=0.1)],
        "predict_flow": [normal(2, 29, 3, 3, scale=0.3), normal(2, scale=0.3)],
    }


def numpy_net(img0, img1, blobs):
    """The net, layer by layer, with the fork's ports."""
    def nomean(img, name):
        scaled = img.astype(F) * F(0.00392156862745)
        return augmentation_forward(scaled, 1000, False,
                                    adjust_blobs(blobs[name], img.shape, False)).astype(F)

    img0_r = resample_forward(nomean(img0, "img0s_aug"), 24, 24, "linear", True)
    img1_r = resample_forward(nomean(img1, "img1s_aug"), 24, 24, "linear", True)
    w1, b1 = blobs["conv1"]
    conv1a = leaky(conv(img0_r, w1, b1, stride=2, pad=1)).astype(F)
    conv1b = leaky(conv(img1_r, w1, b1, stride=2, pad=1)).astype(F)
    corr = leaky(correlation_reference(conv1a, conv1b, 4, 1, 4, 1, 2))
    redir = leaky(conv(conv1a, *blobs["conv_redir"]))
    flow = conv(np.concatenate([redir, corr], axis=1), *blobs["predict_flow"], pad=1).astype(F)
    flow_up = resample_forward(flow, 24, 24, "linear", False)
    warped = warp_forward(img1_r, flow_up)
    fusion = accum_forward([img0_r, warped, flow], 24, 24)
    final = resample_forward(flow, 18, 22, "linear", True)
    return {"fusion_input": fusion, "predict_flow_final": final, "img1_warped": warped,
            "corr": corr}


@pytest.mark.layer_type("Correlation", "FlowWarp", "Resample", "Accum", "DataAugmentation")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_flownetc_tiny_deploy_runs_as_the_fork(data_format):
    rng = np.random.default_rng(0)
    blobs = weights(rng)
    img0 = rng.uniform(0, 255, (1, 3, 18, 22)).astype(F)
    img1 = np.roll(img0, shift=(1, 2), axis=(2, 3)) + rng.uniform(-5, 5, img0.shape).astype(F)
    wanted = ["fusion_input", "predict_flow_final", "img1_warped", "corr"]
    model = import_model(NET.read_text(), data_format=data_format, outputs=wanted)
    load_into(model, blobs)
    outputs = model([to_keras_layout(img0, data_format),
                              to_keras_layout(img1.astype(F), data_format)])
    expected = numpy_net(img0, img1, blobs)
    for name in wanted:
        got = from_keras_layout(keras.ops.convert_to_numpy(outputs[name]), data_format)
        assert got.shape == expected[name].shape, name
        np.testing.assert_allclose(got, expected[name], rtol=1e-4, atol=2e-5, err_msg=name)
    # The flow moves some points out of the image: the warp's fill is met.
    assert (expected["img1_warped"] == 0).any()


@pytest.mark.layer_type("Correlation")
def test_flownetc_tiny_deploy_in_analyze():
    rows = {row.name: row for row in analyze(NET.read_text()).layers}
    assert rows["corr"].tops == (("corr", (1, 25, 12, 12)),)
    assert rows["fusion_input"].tops == (("fusion_input", (1, 8, 24, 24)),)
    assert rows["flow_final"].tops == (("predict_flow_final", (1, 2, 18, 22)),)
    assert rows["img0s_aug"].weight_shapes == ((1, 1, 1, 1), (1, 3, 18, 22), (1, 3, 1, 1))


@pytest.mark.layer_type("Correlation", "FlowWarp", "Resample", "Accum", "DataAugmentation")
def test_schema_has_the_forks_numbers():
    """The fork's field numbers where BVLC leaves them free; 2600 up where
    they clash (augmentation_param is 149 there, our upsample_param;
    coeff_schedule_param 148, BVLC's clip_param); inside the messages the
    fork's own (src/caffe/proto/caffe.proto of lmb-freiburg/flownet2)."""
    from keras_caffe.proto import caffe_pb2

    layer = caffe_pb2.LayerParameter.DESCRIPTOR.fields_by_name
    assert {name: layer[name].number for name in (
        "correlation_param", "resample_param", "flow_warp_param", "accum_param",
        "augmentation_param", "coeff_schedule_param")} == {
        "correlation_param": 150, "resample_param": 155, "flow_warp_param": 159,
        "accum_param": 160, "augmentation_param": 2600, "coeff_schedule_param": 2601}
    numbers = {
        ("CorrelationParameter", "correlation_type"): 15,
        ("CorrelationParameter", "single_direction"): 8,
        ("ResampleParameter", "factor"): 5, ("ResampleParameter", "antialias"): 4,
        ("AccumParameter", "have_reference"): 4, ("FlowWarpParameter", "fill_value"): 1,
        ("AugmentationParameter", "crop_width"): 33, ("AugmentationParameter", "mean"): 18,
        ("AugmentationParameter", "noise"): 107, ("RandomGeneratorParameter", "multiplier"): 9,
    }
    for (message, field), number in numbers.items():
        descriptor = caffe_pb2.DESCRIPTOR.message_types_by_name[message]
        assert descriptor.fields_by_name[field].number == number, (message, field)
