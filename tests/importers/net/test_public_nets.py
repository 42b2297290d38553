"""End to end on public nets of the forks' families (issue 15): each file,
as published, imported with random Caffe blobs written to a caffemodel,
run forward in both data formats, against ``caffe_numpy`` (a float64 numpy
run of the same net with the same blobs).

- SegNet-basic (alexgkendall/SegNet-Tutorial): BN, MAX pooling masks,
  Upsample, LRN; its DenseImageData layer replaced by an Input of 24x32
  (SegNet's 360x480 at 1/15 scale: the same odd size after the 4th pooling,
  so ``pad_out_h`` holds); no other change.
- SE-ResNet-50 (hujie-frank/SENet): Axpy, global pooling, Sigmoid.
- ShuffleNet 1x g3 (farmingyard/ShuffleNet): ShuffleChannel,
  ConvolutionDepthwise, AVE pooling with Caffe's ceil rounding.
- LRCN's captioning step (BVLC's examples/coco_caption, the recurrent
  nets' own example): Embed, two LSTMs (the second with the image feature
  as static input), InnerProduct on axis 2, Softmax on axis 2; its 1000
  streams cut to 6 (the ``input_shape`` lines), nothing else changed.
- MobileNet-SSD (chuanqi305/MobileNet-SSD, for weiliu89's SSD fork):
  Permute, Flatten, PriorBox, Reshape, Softmax on axis 2, DetectionOutput
  (its class-confidence convolutions' blobs scaled up so that some scores
  pass the file's confidence_threshold of 0.25 and NMS has work to do).

The blobs are random but in a sensible range (BatchNorm variance around 1,
weights scaled by the fan-in), so activations neither vanish nor overflow
and the comparison means something 50 layers deep.
"""

import keras
import numpy as np
import pytest

import keras_caffe
from keras_caffe.importers import load_into, load_weights
from keras_caffe.importers.net.blobs import caffe_parts
from keras_caffe.importers.net.export import caffemodel_proto
from keras_caffe.importers.formats.netfile import read_net
from keras_caffe.layers import CaffeBlobs
from support import DATA_FORMATS, NETS, caffe_numpy

pytestmark = pytest.mark.kernels

DATA = NETS


def sensible_blobs(model, seed=0):
    """{Caffe layer name: [arrays]}: random blobs of the model's Caffe shapes."""
    rng = np.random.RandomState(seed)
    types = {name: part[3] for name, part in caffe_parts(model).items()}
    blobs = {}
    for layer in model.layers:
        if not isinstance(layer, CaffeBlobs):
            continue
        shapes = iter(layer.caffe_blob_shapes())
        for name, _, count in layer.caffe_parts:
            blobs[name] = _blobs_of(types[name], [next(shapes) for _ in range(count)], rng)
    return blobs


def _blobs_of(caffe_type, shapes, rng):
    if caffe_type == "BatchNorm":
        mean, var, factor = shapes
        return [rng.normal(0, 0.1, mean), rng.uniform(0.5, 1.5, var), np.ones(factor)]
    if caffe_type in ("Scale", "BN"):
        return [rng.uniform(0.5, 1.5, shapes[0])] + [rng.normal(0, 0.1, s) for s in shapes[1:]]
    # matrices and kernels scaled by their fan-in (an LSTM's several too),
    # biases small
    return [rng.normal(0, np.sqrt(1.0 / np.prod(s[1:])), s) if len(s) >= 2
            else rng.normal(0, 0.1, s) for s in shapes]


def compare(text, inputs, outputs, tmp_path, rtol=2e-4, adjust=None, exact=None):
    net, _ = read_net(text)
    # The channels_last model, imported first: its Caffe shapes give the
    # blobs, which it then loads from the caffemodel written with them, as
    # import_model(weights=...) loads them after building.
    first = keras_caffe.import_model(text, outputs=outputs)
    blobs = sensible_blobs(first)
    if adjust is not None:
        adjust(blobs)
    weights = tmp_path / "random.caffemodel"
    weights.write_bytes(caffemodel_proto(first, blobs).SerializeToString())
    load_into(first, load_weights(weights), source=str(weights))
    want = caffe_numpy.run(net, inputs, blobs)
    exact = exact or {}
    for data_format in DATA_FORMATS:
        model = first if data_format == "channels_last" else keras_caffe.import_model(
            text, weights=weights, data_format=data_format, outputs=outputs)
        feed = [_layout(x, data_format) for x in inputs.values()]
        # A call, not predict: LRCN's inputs differ in their first axis (T, N).
        got = model(feed[0] if len(feed) == 1 else feed)
        got = [got[name] for name in outputs] if isinstance(got, dict) else [got]
        got = [keras.ops.convert_to_numpy(g) for g in got]
        for name, value in zip(outputs, got):
            expected, value = want[name], _layout(value, data_format, back=True)
            if name in exact:
                expected = exact[name](expected, value)
            scale = np.abs(expected).max()
            assert scale > 1e-3, f"{name}: the reference is all but zero"
            np.testing.assert_allclose(value, expected,
                                       rtol=rtol, atol=rtol * scale, err_msg=f"{name}, {data_format}")
    return want


def _layout(x, data_format, back=False):
    if data_format == "channels_first" or x.ndim < 3:
        return x
    return np.moveaxis(x, -1, 1) if back else np.moveaxis(x, 1, -1)


@pytest.mark.layer_type("BN")
@pytest.mark.layer_type("Upsample")
@pytest.mark.layer_type("Pooling")
def test_segnet_basic_matches_numpy(tmp_path):
    text = (DATA / "segnet_basic_inference.prototxt").read_text()
    start = text.index("layer {")
    end = text.index("layer {", start + 1)
    text = (text[:start] + 'layer { name: "data" type: "Input" top: "data" '
            'input_param { shape { dim: 1 dim: 3 dim: 24 dim: 32 } } }\n' + text[end:])
    x = np.random.RandomState(1).uniform(0, 1, (1, 3, 24, 32)).astype("float32")
    want = compare(text, {"data": x}, ["conv_classifier", "prob"], tmp_path)
    assert want["prob"].shape == (1, 11, 24, 32)
    assert want["upsample4"].shape == (1, 64, 3, 4)   # pad_out_h: 2 * 2 - 1


@pytest.mark.layer_type("Axpy")
def test_se_resnet_50_matches_numpy(tmp_path):
    text = (DATA / "se_resnet_50.prototxt").read_text()
    x = np.random.RandomState(2).uniform(-1, 1, (1, 3, 224, 224)).astype("float32")
    want = compare(text, {"data": x}, ["classifier", "prob"], tmp_path, rtol=1e-3)
    assert want["prob"].shape == (1, 1000)


@pytest.mark.layer_type("ShuffleChannel")
@pytest.mark.layer_type("ConvolutionDepthwise")
def test_shufflenet_1x_g3_matches_numpy(tmp_path):
    text = (DATA / "shufflenet_1x_g3_deploy.prototxt").read_text()
    x = np.random.RandomState(3).uniform(-1, 1, (1, 3, 224, 224)).astype("float32")
    want = compare(text, {"data": x}, ["fc1000"], tmp_path, rtol=1e-3)
    assert want["fc1000"].shape == (1, 1000, 1, 1)


@pytest.mark.layer_type("DetectionOutput")
@pytest.mark.layer_type("PriorBox")
@pytest.mark.layer_type("Permute")
def test_mobilenet_ssd_matches_numpy(tmp_path):
    from importers.layer_types.test_detection_output import padded

    text = (DATA / "mobilenet_ssd_deploy.prototxt").read_text()
    x = np.random.RandomState(4).uniform(-1, 1, (1, 3, 300, 300)).astype("float32")

    def sharpen(blobs):
        for name, layer_blobs in blobs.items():
            if name.endswith("mbox_conf"):
                layer_blobs[:] = [b * 6 for b in layer_blobs]

    def as_keras(reference, got):       # the fork's (1, 1, kept, 7), padded
        return padded(reference, 1, got.shape[2])

    want = compare(text, {"data": x}, ["mbox_loc", "mbox_conf_flatten", "mbox_priorbox",
                                       "detection_out"],
                   tmp_path, rtol=1e-3, adjust=sharpen, exact={"detection_out": as_keras})
    kept = want["detection_out"][0, 0]
    assert 5 <= len(kept) <= 100 and (kept[:, 2] >= 0.25).all()


@pytest.mark.layer_type("LSTM")
@pytest.mark.layer_type("Embed")
def test_lrcn_captioning_step_matches_numpy(tmp_path):
    text = (DATA / "lrcn_word_to_preds_deploy.prototxt").read_text()
    text = text.replace("input_shape { dim: 1 dim: 1000 }", "input_shape { dim: 1 dim: 6 }")
    text = text.replace("input_shape { dim: 1000 dim: 1000 }", "input_shape { dim: 6 dim: 1000 }")
    rng = np.random.RandomState(5)
    inputs = {"cont_sentence": np.array([[0, 1, 1, 0, 1, 1]], np.float32),
              "input_sentence": rng.randint(0, 8801, (1, 6)).astype(np.float32),
              "image_features": rng.uniform(-1, 1, (6, 1000)).astype(np.float32)}
    want = compare(text, inputs, ["lstm2", "predict"], tmp_path, rtol=1e-3)
    assert want["probs"].shape == (1, 6, 8801)
