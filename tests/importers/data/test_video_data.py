"""C3D's VideoData against numpy recomputations of the fork (facebook/C3D,
C3D-v1.1): ``VideoDataLayer::DataLayerSetUp`` / ``load_batch``
(src/caffe/layers/video_data_layer.cpp), ``ReadImageSequenceToVolumeDatum``
(src/caffe/util/image_io.cpp: frames ``"%s/%06d.jpg"`` from the start frame,
every ``sampling_rate``-th, read in color, resized with INTER_LINEAR, packed
(C, L, H, W)) and ``DataTransformer::VideoTransform(const VolumeDatum&,
Dtype*)`` (src/caffe/data_transformer.cpp: ``(pixel - mean) * scale``, one
crop offset and one flip for the whole clip). The tests write small PNG
frames under the fork's ``.jpg`` names (OpenCV reads by content), so the
pixels are exact."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_caffe
from keras_caffe.errors import LayerError
from keras_caffe.importers import training_args
from keras_caffe.importers.data import images
from keras_caffe.analysis import analyze
from keras_caffe.importers.data.pipeline_core import DataPipeline
from keras_caffe.importers.data.pipelines import layer_pipeline, net_pipeline
from keras_caffe.proto import caffe_pb2
from support import DATA_FORMATS

pytestmark = pytest.mark.layer_type("VideoData")


def _fixtures():
    from support import pipeline_fixtures

    return pipeline_fixtures


_f = _fixtures()
layer, png_bytes, take, to_caffe = _f.layer, _f.png_bytes, _f.take, _f.to_caffe


def write_clips(tmp_path, count=4, frames=9, shape=(3, 5, 6), seed=0, first=1, starts=None,
                labels=None, jitter=False):
    """Folders frm/vid<i>/ of ``frames`` PNG frames (BGR (C, H, W)) numbered from
    ``first`` as %06d.jpg, and list.txt lines ``vid<i>/ start label`` (with
    ``jitter``: ``vid<i>/ frame_count label``). Returns {i: {number: frame}}."""
    rng = np.random.default_rng(seed)
    videos = {}
    lines = []
    for i in range(count):
        folder = tmp_path / "frm" / f"vid{i}"
        folder.mkdir(parents=True)
        videos[i] = {}
        for n in range(first, first + frames):
            frame = rng.integers(0, 256, shape).astype(np.uint8)
            (folder / f"{n:06d}.jpg").write_bytes(png_bytes(frame))
            videos[i][n] = frame
        second = frames if jitter else (starts[i] if starts else first)
        label = labels[i] if labels else i
        lines.append(f"vid{i}/ {second} {label}\n")
    (tmp_path / "list.txt").write_text("".join(lines))
    return videos


def video_layer(tmp_path, param="", transform="", batch=3, length=4, source=None, tops=2):
    source = source or tmp_path / "list.txt"
    top_text = ' top: "label"' if tops == 2 else ""
    return layer(f'name: "video" type: "VideoData" top: "data"{top_text} '
                 f"transform_param {{ {transform} }} video_data_param {{ source: "
                 f'"{source}" root_folder: "{tmp_path}/frm/" new_length: {length} '
                 f"use_image: true batch_size: {batch} {param} }}")


def fork_volume(video, start, length, rate=1, resize=None):
    """ReadImageSequenceToVolumeDatum: (C, L, H, W) uint8 of frames start, start + rate, ..."""
    out = []
    for n in range(start, start + length * rate, rate):
        frame = video[n]
        if resize:
            hwc = tf.constant(np.ascontiguousarray(np.transpose(frame, (1, 2, 0))))
            frame = np.transpose(images.resize_linear(hwc, *resize).numpy(), (2, 0, 1))
        out.append(frame)
    return np.stack(out, axis=1)


def fork_transform(volume, mean=None, mean_values=None, scale=1.0, crop=0, offsets=None,
                   mirror=False):
    """VideoTransform: (pixel - mean[data_index]) * scale at the cropped, flipped index."""
    x = volume.astype(np.float32)
    if mean is not None:
        x = x - mean.astype(np.float32)
    elif mean_values is not None:
        x = x - np.broadcast_to(np.float32(mean_values), (3,))[:, None, None, None]
    if crop:
        h_off, w_off = offsets
        x = x[:, :, h_off:h_off + crop, w_off:w_off + crop]
    if mirror:
        x = x[..., ::-1]
    return x * np.float32(scale)


def data_of(batch, data_format):
    """A model-layout 5-D data batch in Caffe's (N, C, L, H, W)."""
    return to_caffe(batch["data"], data_format)


@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_reads_clips_in_order_wrapping_with_mean_value_and_scale(tmp_path, data_format):
    videos = write_clips(tmp_path, starts=[1, 3, 2, 6], labels=[7, 3, 0, 5])
    pipe = layer_pipeline(video_layer(tmp_path, transform="scale: 0.5 mean_value: 10 "
                                      "mean_value: 20 mean_value: 30"),
                          "TEST", data_format=data_format)
    last = data_format == "channels_last"
    assert pipe.shapes == {"data": (3, 4, 5, 6, 3) if last else (3, 3, 4, 5, 6),
                           "label": (3,)}
    assert pipe.num_records == 4
    starts, labels = [1, 3, 2, 6], [7, 3, 0, 5]
    for b, batch in enumerate(take(pipe, 4)):  # 12 clips: the list wraps three times
        clips = [(3 * b + j) % 4 for j in range(3)]
        expected = np.stack([fork_transform(fork_volume(videos[c], starts[c], 4),
                                            mean_values=[10, 20, 30], scale=0.5)
                             for c in clips])
        np.testing.assert_array_equal(data_of(batch, data_format), expected)
        np.testing.assert_array_equal(batch["label"], np.float32([labels[c] for c in clips]))


def test_resizes_frames_linearly_and_steps_by_the_sampling_rate(tmp_path):
    videos = write_clips(tmp_path, count=2, frames=9, shape=(3, 5, 7))
    pipe = layer_pipeline(video_layer(tmp_path, "new_height: 9 new_width: 4 sampling_rate: 2",
                                      batch=2, length=3), "TEST", data_format="channels_first")
    assert pipe.shapes["data"] == (2, 3, 3, 9, 4)
    batch = take(pipe, 1)[0]
    for j in range(2):  # frames 1, 3, 5
        np.testing.assert_array_equal(batch["data"][j],
                                      fork_volume(videos[j], 1, 3, 2, (9, 4)).astype(np.float32))


def _mean_blob(mean, c3d_v1=False):
    if c3d_v1:  # C3D-v1.0's BlobProto: num, channels, length, height, width, data
        return caffe_pb2.C3DBlobProto(num=1, channels=mean.shape[1], length=mean.shape[2],
                                      height=mean.shape[3], width=mean.shape[4],
                                      data=mean.ravel().tolist()).SerializeToString()
    blob = caffe_pb2.BlobProto()
    blob.shape.dim.extend(mean.shape)
    blob.data.extend(mean.ravel().tolist())
    return blob.SerializeToString()


@pytest.mark.parametrize("c3d_v1", [False, True])
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_test_phase_centre_crop_of_a_5d_mean_file(tmp_path, data_format, c3d_v1):
    """The mean volume is subtracted at the uncropped positions, then the
    centre crop ((H - crop) / 2) is taken, as VideoTransform indexes it."""
    videos = write_clips(tmp_path, count=3, shape=(3, 7, 8))
    mean = np.random.default_rng(5).uniform(0, 255, (1, 3, 4, 7, 8)).astype(np.float32)
    (tmp_path / "mean.binaryproto").write_bytes(_mean_blob(mean, c3d_v1))
    pipe = layer_pipeline(video_layer(tmp_path, transform=f'crop_size: 4 scale: 0.25 mean_file: '
                                      f'"{tmp_path}/mean.binaryproto"'),
                          "TEST", data_format=data_format)
    batch = take(pipe, 1)[0]
    expected = np.stack([fork_transform(fork_volume(videos[c], 1, 4), mean=mean[0], scale=0.25,
                                        crop=4, offsets=(1, 2)) for c in range(3)])
    np.testing.assert_allclose(data_of(batch, data_format), expected, rtol=0, atol=1e-5)


def test_a_mean_file_of_the_wrong_shape_is_refused(tmp_path):
    write_clips(tmp_path, count=1)
    (tmp_path / "mean.binaryproto").write_bytes(_mean_blob(np.zeros((1, 3, 2, 5, 6),
                                                                    np.float32)))
    with pytest.raises(LayerError, match=r"layer 'video': mean_file '.*mean.binaryproto' has "
                                         r"shape 3x2x5x6 but the clips are 1x3x4x5x6"):
        layer_pipeline(video_layer(tmp_path, transform=f'mean_file: "{tmp_path}/'
                                                       'mean.binaryproto"'))


def _windows(volume, crop):
    """Every (flip, h_off, w_off) crop of a (C, L, H, W) volume."""
    _, _, height, width = volume.shape
    for flip in (False, True):
        for top in range(height - crop + 1):
            for left in range(width - crop + 1):
                yield (flip, top, left), fork_transform(volume, crop=crop, offsets=(top, left),
                                                        mirror=flip)


@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_train_crops_and_mirrors_whole_clips_reproducibly(tmp_path, data_format):
    """TRAIN: one random offset in [0, H - crop] and one coin flip per clip,
    the same for all its frames; the seed makes the batches reproducible."""
    videos = write_clips(tmp_path, count=4, shape=(3, 6, 7), seed=1)
    net = video_layer(tmp_path, transform="crop_size: 3 mirror: true", batch=4, length=3)
    pipe = layer_pipeline(net, "TRAIN", data_format=data_format)
    seen = set()
    batches = take(pipe, 6)
    for batch in batches:
        data = data_of(batch, data_format)
        for j in range(4):
            found = [key for key, window in _windows(fork_volume(videos[j], 1, 3), 3)
                     if np.array_equal(window, data[j])]
            assert found, "not one window of the whole clip"
            seen.add(found[0])
    assert {flip for flip, _, _ in seen} == {False, True}
    assert len({(top, left) for _, top, left in seen}) > 4
    again = take(layer_pipeline(net, "TRAIN", data_format=data_format), 6)
    for a, b in zip(batches, again):
        np.testing.assert_array_equal(a["data"], b["data"])
    other = take(layer_pipeline(net, "TRAIN", data_format=data_format, seed=7), 6)
    assert any(not np.array_equal(a["data"], b["data"]) for a, b in zip(batches, other))


def test_shuffles_every_epoch_from_the_seed(tmp_path):
    write_clips(tmp_path, count=6, frames=4)
    net = video_layer(tmp_path, "shuffle: true", batch=3, length=2)
    got = np.concatenate([b["label"] for b in take(layer_pipeline(net), 8)]).reshape(4, 6)
    for epoch in got:
        assert sorted(epoch) == list(range(6))
    assert len({tuple(e) for e in got}) > 1
    again = np.concatenate([b["label"] for b in take(layer_pipeline(net), 8)]).reshape(4, 6)
    np.testing.assert_array_equal(got, again)
    other = np.concatenate([b["label"] for b in take(layer_pipeline(net, seed=3), 8)])
    assert not np.array_equal(got.ravel(), other)


def test_temporal_jitter_starts_within_the_clip_in_train_and_at_frame_0_in_test(tmp_path):
    """use_temporal_jitter: the second column is the frame count F; TRAIN
    starts at Rand(F - L * rate + 1) + 1, TEST at frame 0."""
    videos = write_clips(tmp_path, count=2, frames=10, first=0, jitter=True)
    (tmp_path / "list.txt").write_text("vid0/ 9 0\nvid1/ 9 1\n")  # frames 1..9 counted
    net = video_layer(tmp_path, "use_temporal_jitter: true sampling_rate: 2", batch=2, length=3)
    starts = set()
    for batch in take(layer_pipeline(net, "TRAIN", data_format="channels_first"), 10):
        for j in range(2):
            found = [s for s in range(1, 5)  # 9 - 3 * 2 + 1 = 4 starts: 1..4
                     if np.array_equal(batch["data"][j], fork_volume(videos[j], s, 3, 2))]
            assert len(found) == 1
            starts.add(found[0])
    assert starts == {1, 2, 3, 4}
    batch = take(layer_pipeline(net, "TEST", data_format="channels_first"), 1)[0]
    for j in range(2):
        np.testing.assert_array_equal(batch["data"][j], fork_volume(videos[j], 0, 3, 2))
    (tmp_path / "list.txt").write_text("vid0/ 9 0\nvid1/ 5 1\n")
    with pytest.raises(LayerError, match=r"layer 'video': .*list.txt:2: the clip has 5 frames, "
                                         "fewer than new_length \\* sampling_rate = 6"):
        layer_pipeline(net, "TRAIN")


def test_sampling_rate_jitter_draws_each_clips_rate(tmp_path):
    videos = write_clips(tmp_path, count=1, frames=12)
    net = video_layer(tmp_path, "use_sampling_rate_jitter: true max_sampling_rate: 3",
                      batch=1, length=3)
    rates = set()
    for batch in take(layer_pipeline(net, "TRAIN", data_format="channels_first"), 12):
        found = [r for r in (1, 2, 3)
                 if np.array_equal(batch["data"][0], fork_volume(videos[0], 1, 3, r))]
        assert len(found) == 1
        rates.add(found[0])
    assert rates == {1, 2, 3}


def test_multiple_labels_are_multi_hot(tmp_path):
    write_clips(tmp_path, count=2, frames=4)
    (tmp_path / "list.txt").write_text("vid0/ 1 0,3\nvid1/ 1 2\n")
    pipe = layer_pipeline(video_layer(tmp_path, "use_multiple_label: true num_of_labels: 4",
                                      batch=2, length=2))
    assert pipe.shapes["label"] == (2, 4)
    np.testing.assert_array_equal(take(pipe, 1)[0]["label"], [[1, 0, 0, 1], [0, 0, 1, 0]])
    (tmp_path / "list.txt").write_text("vid0/ 1 0,4\n")
    with pytest.raises(LayerError, match=r"list.txt:1: labels 0,4 must lie in \[0, "
                                         "num_of_labels = 4\\)"):
        layer_pipeline(video_layer(tmp_path, "use_multiple_label: true num_of_labels: 4"))


def _raises(message, fn, *args, **kwargs):
    with pytest.raises(LayerError, match=message) as info:
        fn(*args, **kwargs)
    return info.value


def test_bad_lists_and_missing_frames_name_the_file_and_line(tmp_path):
    write_clips(tmp_path, count=3, frames=4)
    listing = tmp_path / "list.txt"
    listing.write_text("vid0/ 1 0\n\nvid1/ 1\n")
    _raises(rf"layer 'video': {listing}:3: expected 'folder start_frame label' \(integers after "
            "the folder\\), got 'vid1/ 1'", layer_pipeline, video_layer(tmp_path))
    listing.write_text("vid0/ one 0\n")
    _raises(rf"{listing}:1: expected 'folder start_frame label'", layer_pipeline,
            video_layer(tmp_path))
    listing.write_text("\n \n")
    _raises(r"layer 'video': VideoData source '.*list.txt' lists no clips", layer_pipeline,
            video_layer(tmp_path))
    _raises(r"layer 'video': VideoData source 'none.txt' not found", layer_pipeline,
            video_layer(tmp_path, source="none.txt"))
    listing.write_text("vid9/ 1 0\n")
    _raises(rf"layer 'video': {listing}:1: frame folder '{tmp_path}/frm/vid9/' not found",
            layer_pipeline, video_layer(tmp_path))
    listing.write_text("vid0/ 1 0\nvid1/ 1 1\n\nvid2/ 2 2\n")
    pipe = layer_pipeline(video_layer(tmp_path, batch=3))
    with pytest.raises(LayerError, match=rf"layer 'video': {listing}:4: frame "
                                         rf"'{tmp_path}/frm/vid2//000005.jpg' not found"):
        with DataPipeline.errors():
            take(pipe, 1)
    (tmp_path / "frm" / "vid1" / "000002.jpg").write_bytes(b"not an image")
    listing.write_text("vid0/ 1 0\nvid1/ 1 1\n")
    with pytest.raises(LayerError, match=r"layer 'video': frame '.*vid1//000002.jpg' is not a "
                                         "JPEG, PNG, GIF or BMP image"):
        with DataPipeline.errors():
            take(layer_pipeline(video_layer(tmp_path, batch=2)), 1)


def test_frames_of_another_size_are_refused(tmp_path):
    write_clips(tmp_path, count=2, frames=4)
    (tmp_path / "frm" / "vid1" / "000003.jpg").write_bytes(png_bytes(np.zeros((3, 4, 6))))
    with pytest.raises(LayerError, match=r"layer 'video': frame '.*vid1//000003.jpg' is 4x6 but "
                                         r"'.*vid1//000001.jpg', the clip's first, is 5x6"):
        with DataPipeline.errors():
            take(layer_pipeline(video_layer(tmp_path, batch=2)), 1)
    for n in range(1, 5):
        (tmp_path / "frm" / "vid1" / f"{n:06d}.jpg").write_bytes(png_bytes(np.zeros((3, 4, 6))))
    with pytest.raises(LayerError, match=r"frame '.*vid1//000001.jpg' is 4x6 \(HxW\); it must be "
                                         "5x6 like the first clip"):
        with DataPipeline.errors():
            take(layer_pipeline(video_layer(tmp_path, batch=2)), 1)
    # Cropped without a mean_file, each clip is cropped at its own size.
    batch = take(layer_pipeline(video_layer(tmp_path, batch=2, transform="crop_size: 3"),
                                "TEST", data_format="channels_first"), 1)[0]
    assert batch["data"].shape == (2, 3, 4, 3, 3)


@pytest.mark.parametrize("fields, transform, message", [
    ({"use_image": False}, "", r"\(VideoData\) video_data_param use_image is false: the clips "
                               "are video files decoded with OpenCV, and keras-caffe has no "
                               "video decoder; extract the frames first"),
    ({"new_length": 0}, "", r"\(VideoData\) video_data_param new_length must be positive, "
                            "got 0"),
    ({"new_height": 5}, "", r"\(VideoData\) new_height and new_width must be set together "
                            r"\(got 5 and 0\)"),
    ({"sampling_rate": 0}, "", r"\(VideoData\) video_data_param sampling_rate must be "
                               "positive, got 0"),
    ({"use_multiple_label": True}, "", r"\(VideoData\) video_data_param num_of_labels must be "
                                       "set together with use_multiple_label"),
    ({}, "mean_value: 1 mean_value: 2", r"\(VideoData\) transform_param has 2 mean_value\(s\) "
                                        "for 3 channels: give 1 or 3"),
    ({}, 'mean_value: 1 mean_file: "m"', r"\(VideoData\) transform_param: cannot specify "
                                         "mean_file and mean_value at the same time"),
    ({}, "force_gray: true", r"\(VideoData\) transform_param force_color / force_gray apply "
                             "to encoded Datums only"),
    ({}, "crop_size: 6", r"crop_size 6 is larger than the 5x6 frames"),
    ({"batch_size": 0}, "", r"batch_size must be positive, got 0"),
])
def test_bad_parameters(tmp_path, fields, transform, message):
    write_clips(tmp_path, count=1, frames=4)
    net = video_layer(tmp_path, transform=transform)
    for field, value in fields.items():
        setattr(net.video_data_param, field, value)
    _raises(rf"layer 'video': {message}", layer_pipeline, net)


def test_needs_its_two_tops_and_warns_of_the_ignored_deprecated_fields(tmp_path):
    write_clips(tmp_path, count=1, frames=4)
    _raises("layer 'video': VideoData has 2 tops, got 1", layer_pipeline,
            video_layer(tmp_path, tops=1))
    with pytest.warns(UserWarning, match="video_data_param crop_size is ignored, as C3D-v1.1 "
                                         "ignores it; give it in transform_param"):
        pipe = layer_pipeline(video_layer(tmp_path, "crop_size: 2", batch=1))
    assert pipe.shapes["data"] == (1, 4, 5, 6, 3)


#: A C3D-style TRAIN net (C3D-v1.1 examples/c3d_ucf101_training/train_simple.prototxt, shrunk).
C3D_TRAIN = """
name: "C3D-tiny"
layer { name: "data" type: "VideoData" top: "data" top: "label" include { phase: TRAIN }
  transform_param { crop_size: 4 mean_value: 128 mirror: true scale: 0.01 }
  video_data_param { source: "list.txt" root_folder: "frm/" new_length: 4 new_height: 6
    new_width: 7 use_image: true batch_size: 4 shuffle: true } }
layer { name: "conv1a" type: "Convolution3D" bottom: "data" top: "conv1a"
  convolution3d_param { num_output: 4 kernel_size: 3 kernel_depth: 3 pad: 1 temporal_pad: 1
    weight_filler { type: "gaussian" std: 0.1 } bias_filler { type: "constant" value: 0 } } }
layer { name: "relu1a" type: "ReLU" bottom: "conv1a" top: "conv1a" }
layer { name: "pool1" type: "Pooling3D" bottom: "conv1a" top: "pool1"
  pooling3d_param { pool: MAX kernel_size: 2 kernel_depth: 2 stride: 2 temporal_stride: 2 } }
layer { name: "fc8" type: "InnerProduct" bottom: "pool1" top: "fc8"
  inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc8" bottom: "label" top: "loss" }
"""


def test_analyze_sizes_a_video_net_from_its_list_file(tmp_path):
    write_clips(tmp_path, count=2, frames=5, shape=(3, 5, 8))
    net = (f'layer {{ name: "video" type: "VideoData" top: "data" top: "label" '
           f'video_data_param {{ source: "{tmp_path}/list.txt" root_folder: "{tmp_path}/frm/" '
           f"new_length: 5 use_image: true batch_size: 2 }} }}\n"
           'layer { name: "conv" type: "Convolution3D" bottom: "data" top: "conv" '
           "convolution3d_param { num_output: 6 kernel_size: 3 kernel_depth: 3 } }\n")
    report = analyze(net, batch=None, phase="TRAIN")
    assert report.layers[0].tops == (("data", (2, 3, 5, 5, 8)), ("label", (2,)))
    assert report.layers[1].tops == (("conv", (2, 6, 3, 3, 6)),)
    resized = net.replace("batch_size: 2", "batch_size: 2 new_height: 9 new_width: 7")
    assert analyze(resized, batch=None).layers[0].tops[0] == ("data", (2, 3, 5, 9, 7))
    cropped = net.replace("video_data_param", "transform_param { crop_size: 4 } "
                                              "video_data_param")
    assert analyze(cropped, batch=8).layers[0].tops[0] == ("data", (8, 3, 5, 4, 4))
    listing = tmp_path / "list.txt"
    listing.write_text("vid0/ 1\n")
    with pytest.raises(LayerError, match=rf"{listing}:1: expected 'folder start_frame label'"):
        analyze(net, batch=None)
    assert analyze(net, batch=3, input_shapes={"data": (3, 5, 5, 8), "label": ()}).layers[
        0].tops == (("data", (3, 3, 5, 5, 8)), ("label", (3,)))


@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_a_c3d_train_net_imports_and_trains_from_its_video_data(tmp_path, monkeypatch,
                                                                 data_format):
    rng = np.random.default_rng(0)
    labels = [0, 1, 2, 0, 1, 2, 0, 1]
    lines = []
    for i, label in enumerate(labels):  # each class brighter than the last
        folder = tmp_path / "frm" / f"clip{i}"
        folder.mkdir(parents=True)
        for n in range(1, 5):
            frame = rng.integers(0, 60, (3, 6, 7)) + 90 * label
            (folder / f"{n:06d}.jpg").write_bytes(png_bytes(frame))
        lines.append(f"clip{i}/ 1 {label}\n")
    (tmp_path / "list.txt").write_text("".join(lines))
    prototxt = tmp_path / "train.prototxt"
    prototxt.write_text(C3D_TRAIN)
    monkeypatch.chdir(tmp_path.parent)  # list and frames are found next to the prototxt
    report = analyze(str(prototxt), batch=None, phase="TRAIN")
    assert report.layers[0].tops == (("data", (4, 3, 4, 4, 4)), ("label", (4,)))
    keras.utils.set_random_seed(0)  # the fillers' draws
    model = keras_caffe.import_model(prototxt, phase="TRAIN", data_format=data_format)
    pipe = net_pipeline(str(prototxt), "TRAIN", data_format=data_format)
    expected = (4, 4, 4, 3) if data_format == "channels_last" else (3, 4, 4, 4)
    assert tuple(model.inputs[0].shape[1:]) == pipe.shapes["data"][1:] == expected
    batch = take(pipe, 1)[0]
    assert set(batch["label"]) <= {0.0, 1.0, 2.0}
    assert np.abs(batch["data"]).max() <= 1.28 + 1e-6
    model.compile(optimizer=keras_caffe.SGD(learning_rate=0.01, momentum=0.9),
                  **training_args(model))
    ds = pipe.dataset().map(lambda b: (b["data"], b["label"]))
    losses = model.fit(ds, steps_per_epoch=4, epochs=4, verbose=0, shuffle=False).history["loss"]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
