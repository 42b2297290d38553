"""SegNet's DenseImageData against numpy recomputations of the fork's
``DenseImageDataLayer::InternalThreadEntry`` (alexgkendall/caffe-segnet:
src/caffe/layers/dense_image_data_layer.cpp): images and label images read by
``ReadImageToCVMat`` (the label in gray, resized with INTER_NEAREST), one mirror
flip and one crop offset for both, the image then transformed
(``DataTransformer::Transform``: ``(pixel - mean) * scale``), the label kept as
read. Small PNGs are written by the tests."""

import numpy as np
import pytest
import tensorflow as tf

from keras_caffe.errors import LayerError
from keras_caffe.importers import import_model
from keras_caffe.importers.data import images
from keras_caffe.analysis import analyze
from keras_caffe.importers.data.pipeline_core import DataPipeline
from keras_caffe.importers.data.pipelines import layer_pipeline, net_pipeline
from support import DATA_FORMATS

pytestmark = pytest.mark.layer_type("DenseImageData")


def _fixtures():
    from support import pipeline_fixtures

    return pipeline_fixtures


_f = _fixtures()
layer, png_bytes, take, to_caffe = _f.layer, _f.png_bytes, _f.take, _f.to_caffe


def write_pairs(tmp_path, count=5, shape=(3, 4, 6), seed=0, label_of=None):
    """PNGs pics/img i.png (BGR (C, H, W)) and pics/lab i.png (gray), and list.txt.

    ``label_of(image)`` gives the (H, W) label image; by default random classes 0-11."""
    rng = np.random.default_rng(seed)
    pictures = rng.integers(0, 256, (count, *shape)).astype(np.uint8)
    labels = np.stack([label_of(p) if label_of else rng.integers(0, 12, shape[1:])
                       for p in pictures]).astype(np.uint8)
    folder = tmp_path / "pics"
    folder.mkdir()
    for i in range(count):
        (folder / f"img{i}.png").write_bytes(png_bytes(pictures[i]))
        (folder / f"lab{i}.png").write_bytes(png_bytes(labels[i][None]))
    (tmp_path / "list.txt").write_text("".join(f"img{i}.png lab{i}.png\n" for i in range(count)))
    return pictures, labels


def dense_layer(tmp_path, param="", transform="", batch=3, source=None):
    source = source or tmp_path / "list.txt"
    return layer(f'name: "seg" type: "DenseImageData" top: "data" top: "label" '
                 f"transform_param {{ {transform} }} dense_image_data_param {{ source: "
                 f'"{source}" root_folder: "{tmp_path}/pics/" batch_size: {batch} {param} }}')


def nearest(image, height, width):
    """OpenCV's resizeNN: source index min(floor(d * src / dst), src - 1) per axis."""
    h, w = image.shape[:2]
    rows = np.minimum(np.floor(np.arange(height) * (1.0 / (height / h))).astype(int), h - 1)
    cols = np.minimum(np.floor(np.arange(width) * (1.0 / (width / w))).astype(int), w - 1)
    return image[rows][:, cols]


@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_reads_pairs_in_order_wrapping_with_mean_and_scale(tmp_path, data_format):
    pictures, labels = write_pairs(tmp_path)
    pipe = layer_pipeline(dense_layer(tmp_path, transform="scale: 0.5 mean_value: 10 "
                                      "mean_value: 20 mean_value: 30"),
                          "TEST", data_format=data_format)
    last = data_format == "channels_last"
    assert pipe.shapes == {"data": (3, 4, 6, 3) if last else (3, 3, 4, 6),
                           "label": (3, 4, 6, 1) if last else (3, 1, 4, 6)}
    assert pipe.num_records == 5
    expected = (pictures.astype(np.float32) - np.float32([10, 20, 30])[:, None, None]) * 0.5
    for b, batch in enumerate(take(pipe, 4)):  # 12 records: the list wraps twice
        records = [(3 * b + j) % 5 for j in range(3)]
        np.testing.assert_array_equal(to_caffe(batch["data"], data_format), expected[records])
        np.testing.assert_array_equal(to_caffe(batch["label"], data_format),
                                      labels[records][:, None].astype(np.float32))


def test_resizes_images_linearly_and_labels_by_nearest_neighbour(tmp_path):
    pictures, labels = write_pairs(tmp_path, count=3, shape=(3, 5, 7))
    pipe = layer_pipeline(dense_layer(tmp_path, "new_height: 9 new_width: 4 is_color: false"),
                          data_format="channels_first")
    assert pipe.shapes == {"data": (3, 1, 9, 4), "label": (3, 1, 9, 4)}
    batch = take(pipe, 1)[0]
    for j in range(3):
        rgb = np.transpose(pictures[j], (1, 2, 0))[:, :, ::-1]
        gray = images.decode(tf.io.encode_png(rgb), "gray")  # libpng's gray, as imread's
        np.testing.assert_array_equal(batch["data"][j, 0],
                                      images.resize_linear(gray, 9, 4).numpy()[:, :, 0])
        np.testing.assert_array_equal(batch["label"][j, 0], nearest(labels[j], 9, 4))
    # Upscaling and downscaling along each axis: the nearest rows/columns, no blending.
    np.testing.assert_array_equal(nearest(np.arange(5)[:, None], 9, 1)[:, 0],
                                  [0, 0, 1, 1, 2, 2, 3, 3, 4])
    np.testing.assert_array_equal(nearest(np.arange(7)[None], 1, 4)[0], [0, 1, 3, 5])


def _window(image, flip, top, left, height, width):
    source = image[..., ::-1] if flip else image
    return source[..., top:top + height, left:left + width]


@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_one_crop_and_one_mirror_for_image_and_label(tmp_path, data_format):
    """The label is the image's first channel: after the shared crop and flip
    the label must still equal it, pixel for pixel; the crops are windows of
    the mirrored (or not) image at offsets in range, and both vary."""
    pictures, _ = write_pairs(tmp_path, count=4, shape=(3, 6, 7), seed=1,
                              label_of=lambda image: image[0])
    pipe = layer_pipeline(dense_layer(tmp_path, "crop_height: 3 crop_width: 4 mirror: true",
                                      batch=4), "TEST", data_format=data_format)
    assert pipe.shapes["label"] == ((4, 3, 4, 1) if data_format == "channels_last"
                                    else (4, 1, 3, 4))
    seen = set()
    for batch in take(pipe, 8):
        data, label = to_caffe(batch["data"], data_format), to_caffe(batch["label"], data_format)
        np.testing.assert_array_equal(label[:, 0], data[:, 0])
        for j in range(4):
            found = [(flip, top, left) for flip in (False, True) for top in range(4)
                     for left in range(4)
                     if np.array_equal(_window(pictures[j], flip, top, left, 3, 4), data[j])]
            assert found, "not a window of the image"
            seen.add(found[0])
    assert {flip for flip, _, _ in seen} == {False, True}
    assert len({(top, left) for _, top, left in seen}) > 4
    again = take(layer_pipeline(dense_layer(tmp_path, "crop_height: 3 crop_width: 4 "
                                            "mirror: true", batch=4), "TEST",
                                data_format=data_format), 8)
    for a, b in zip(take(pipe, 8), again):  # the seed makes them reproducible
        np.testing.assert_array_equal(a["data"], b["data"])


def test_shuffles_every_epoch(tmp_path):
    write_pairs(tmp_path, count=6, label_of=lambda image: np.zeros(image.shape[1:]))
    for i in range(6):  # label i is constant i: the labels say the order
        (tmp_path / "pics" / f"lab{i}.png").write_bytes(png_bytes(np.full((1, 4, 6), i)))
    pipe = layer_pipeline(dense_layer(tmp_path, "shuffle: true", batch=3))
    got = np.concatenate([b["label"][:, 0, 0, 0] for b in take(pipe, 8)]).reshape(4, 6)
    for epoch in got:
        assert sorted(epoch) == list(range(6))
    assert len({tuple(e) for e in got}) > 1


def test_analyze_and_import_size_the_net_from_the_first_record(tmp_path):
    write_pairs(tmp_path, count=2, shape=(3, 5, 8))
    net = (f'layer {{ name: "seg" type: "DenseImageData" top: "data" top: "label" '
           f'dense_image_data_param {{ source: "{tmp_path}/list.txt" root_folder: '
           f'"{tmp_path}/pics/" batch_size: 4 }} }}\n'
           'layer { name: "conv" type: "Convolution" bottom: "data" top: "score" '
           "convolution_param { num_output: 12 kernel_size: 1 } }\n"
           'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "score" bottom: "label" '
           'top: "loss" }\n')
    report = analyze(net, batch=None, phase="TRAIN")
    assert report.layers[0].tops == (("data", (4, 3, 5, 8)), ("label", (4, 1, 5, 8)))
    assert report.layers[1].tops == (("score", (4, 12, 5, 8)),)
    crop = net.replace("batch_size: 4", "batch_size: 4 crop_height: 2 crop_width: 3")
    assert analyze(crop, batch=None, phase="TRAIN").layers[0].tops == (
        ("data", (4, 3, 2, 3)), ("label", (4, 1, 2, 3)))
    resized = net.replace("batch_size: 4", "batch_size: 4 new_height: 7 new_width: 9 "
                                           "is_color: false")
    assert analyze(resized, batch=None, phase="TRAIN").layers[0].tops == (
        ("data", (4, 1, 7, 9)), ("label", (4, 1, 7, 9)))
    model = import_model(net, phase="TRAIN", data_format="channels_first")
    assert model.get_layer("conv").output.shape == (None, 12, 5, 8)


def _raises(message, fn, *args, **kwargs):
    with pytest.raises(LayerError, match=message) as info:
        fn(*args, **kwargs)
    return info.value


def test_bad_lists_and_missing_files_name_the_file_and_line(tmp_path):
    write_pairs(tmp_path, count=2)
    listing = tmp_path / "list.txt"
    listing.write_text("img0.png lab0.png\n\nimg1.png\n")
    _raises(rf"layer 'seg': {listing}:3: expected 'image_path label_image_path', got 'img1.png'",
            layer_pipeline, dense_layer(tmp_path))
    listing.write_text("img0.png lab0.png extra\n")
    _raises(rf"{listing}:1: expected 'image_path label_image_path', got 'img0.png lab0.png "
            "extra'", layer_pipeline, dense_layer(tmp_path))
    listing.write_text("img0.png lab0.png\nimg9.png lab1.png\n")
    _raises(rf"layer 'seg': {listing}:2: image '{tmp_path}/pics/img9.png' not found",
            layer_pipeline, dense_layer(tmp_path))
    listing.write_text("img0.png lab0.png\n\nimg1.png lab7.png\n")
    _raises(rf"layer 'seg': {listing}:3: label image '{tmp_path}/pics/lab7.png' not found",
            layer_pipeline, dense_layer(tmp_path))
    listing.write_text("\n \n")
    _raises(r"layer 'seg': DenseImageData source '.*list.txt' lists no images", layer_pipeline,
            dense_layer(tmp_path))
    _raises(r"layer 'seg': DenseImageData source '.*none.txt' not found", layer_pipeline,
            dense_layer(tmp_path, source="none.txt"))
    (tmp_path / "pics" / "text.png").write_bytes(b"not an image")
    listing.write_text("img0.png text.png\n")
    _raises(r"layer 'seg': cannot decode label image '.*text.png': not a JPEG, PNG, GIF or BMP",
            layer_pipeline, dense_layer(tmp_path))


def test_label_images_must_match_their_images(tmp_path):
    write_pairs(tmp_path, count=3, shape=(3, 4, 6))
    (tmp_path / "pics" / "lab0.png").write_bytes(png_bytes(np.zeros((1, 4, 5))))
    _raises(r"layer 'seg': label image '.*lab0.png' is 4x5 but image '.*img0.png' is 4x6; they "
            "must match", layer_pipeline, dense_layer(tmp_path))
    (tmp_path / "pics" / "lab0.png").write_bytes(png_bytes(np.zeros((1, 4, 6))))
    (tmp_path / "pics" / "lab2.png").write_bytes(png_bytes(np.zeros((1, 3, 6))))
    pipe = layer_pipeline(dense_layer(tmp_path, batch=3))
    with pytest.raises(LayerError, match=r"layer 'seg': label image '.*lab2.png' differs in size "
                                         r"from image '.*img2.png' \(4x6\)"):
        with DataPipeline.errors():
            take(pipe, 1)
    (tmp_path / "pics" / "lab2.png").write_bytes(png_bytes(np.zeros((1, 5, 7))))
    (tmp_path / "pics" / "img2.png").write_bytes(png_bytes(np.zeros((3, 5, 7))))
    with pytest.raises(LayerError, match=r"image '.*img2.png' decodes to 5x7x3 \(HxWxC\); it "
                                         "must be 4x6x3 like the first record"):
        with DataPipeline.errors():
            take(layer_pipeline(dense_layer(tmp_path, batch=3)), 1)


@pytest.mark.parametrize("param, transform, message", [
    ("new_height: 5", "", r"\(DenseImageData\) new_height and new_width must be set together "
                          r"\(got 5 and 0\)"),
    ("crop_width: 2", "", r"\(DenseImageData\) crop_height and crop_width must be set together "
                          r"\(got 0 and 2\)"),
    ("", "crop_size: 2", r"\(DenseImageData\) transform_param crop_size would transform the "
                         "image but not its label"),
    ("", "mirror: true", r"\(DenseImageData\) transform_param mirror would transform the image "
                         "but not its label"),
    ("new_height: 3 new_width: 3 crop_height: 4 crop_width: 2", "",
     r"\(DenseImageData\) crop 4x2 is larger than the 3x3 images"),
    ("crop_height: 5 crop_width: 2", "", r"crop 5x2 is larger than image '.*img0.png' \(4x6\)"),
])
def test_bad_parameters(tmp_path, param, transform, message):
    write_pairs(tmp_path, count=2)
    _raises(rf"layer 'seg': {message}", layer_pipeline, dense_layer(tmp_path, param, transform))


def test_needs_its_two_tops(tmp_path):
    write_pairs(tmp_path, count=2)
    one = layer(f'name: "seg" type: "DenseImageData" top: "data" dense_image_data_param {{ '
                f'source: "{tmp_path}/list.txt" root_folder: "{tmp_path}/pics/" batch_size: 1 }}')
    _raises("layer 'seg': DenseImageData has 2 tops, got 1", layer_pipeline, one)


def test_the_net_pipeline_reads_a_segnet_style_prototxt(tmp_path, monkeypatch):
    """Relative source and root_folder are found next to the prototxt."""
    pictures, labels = write_pairs(tmp_path, count=2)
    monkeypatch.chdir(tmp_path.parent)
    prototxt = tmp_path / "net.prototxt"
    prototxt.write_text('layer { name: "seg" type: "DenseImageData" top: "data" top: "label" '
                        'include { phase: TRAIN } dense_image_data_param { source: "list.txt" '
                        'root_folder: "pics/" batch_size: 2 } }\n')
    batch = take(net_pipeline(str(prototxt), "TRAIN", data_format="channels_first"), 1)[0]
    np.testing.assert_array_equal(batch["data"], pictures.astype(np.float32))
    np.testing.assert_array_equal(batch["label"], labels[:, None].astype(np.float32))
