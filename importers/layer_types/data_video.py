"""VideoData: C3D's clips of video frames (facebook/C3D, C3D-v1.1:
src/caffe/layers/video_data_layer.cpp ``DataLayerSetUp`` / ``load_batch``,
``ReadImageSequenceToVolumeDatum`` in src/caffe/util/image_io.cpp,
``DataTransformer::VideoTransform(const VolumeDatum&, Dtype*)`` in
src/caffe/data_transformer.cpp; ``video_data_param``, field 6660 there).

The list file (``source``) holds one clip a line, ``folder start label``
(read with ``>>``: whitespace-separated, no spaces in paths). A clip is
``new_length`` frames ``root_folder + folder + "/%06d.jpg"`` numbered
``start, start + sampling_rate, ...`` (``sprintf("%s/%06d.jpg")``; OpenCV
reads each by content, so a PNG under that name is read too), each read in
color (BGR, 3 channels: the fork ignores ``is_color``) and resized to
``new_height`` x ``new_width`` with INTER_LINEAR when both are set. The clip is
a (3, L, H, W) volume; ``VideoTransform`` then gives, per element,
``(pixel - mean) * scale`` with ``mean`` the ``mean_file`` volume (a
(1, 3, L, H, W) blob: C3D-v1.1's 5-D ``shape`` or C3D-v1.0's
num/channels/length/height/width blob; cropped at the same offsets, as the
fork indexes it at the uncropped position) or the ``mean_value`` of the
channel; ``crop_size`` cuts every frame of the clip at one offset
(``Rand(H - crop + 1)`` in TRAIN, the centre in TEST) and ``mirror`` flips the
whole clip left-right on one coin flip. Tops: data (N, 3, L, h, w) and label
(N,) (with ``use_multiple_label``: (N, num_of_labels), a 1 at each listed
class, the third column being ``a,b,c``).

``use_temporal_jitter``: the second column is the clip's frame count ``F``;
in TRAIN the start is ``Rand(F - L * rate + 1) + 1`` (frames numbered from 1),
in TEST frame 0, as the fork. (The fork's set-up also reads the clip from
frame ``F``, a quirk; here the shapes come from frame 1.) ``sampling_rate``
steps between frames; ``use_sampling_rate_jitter`` draws the rate of each
clip in ``1 .. max_sampling_rate``. ``shuffle`` permutes the list at set-up
and at every wrap; ``rand_skip`` (TRAIN) skips into the first epoch.

Differences, by necessity or keras-caffe's conventions (see
``importers/data/pipelines.py``): ``use_image: false`` (a video file decoded by
OpenCV's VideoCapture) is refused, keras-caffe has no video decoder; the fork
skips a TRAIN clip it cannot read (a missing frame, too few frames) and
takes the next, here the pipeline stops with a LayerError naming the list
line and the frame; ``mirror`` applies in TRAIN only (the fork flips TEST
clips too); random numbers are keras-caffe's seeded ones. The deprecated
``video_data_param`` copies of scale / mean_file / crop_size / mirror are
ignored, as the fork ignores them (a warning says so).
"""

import os
import warnings

import numpy as np
import tensorflow as tf

from keras_caffe.errors import LayerError, ProtoParseError, WeightsError
from keras_caffe.importers.data import read_errors as data_errors
from keras_caffe.importers.data import images
from keras_caffe.importers.data import records
from keras_caffe.importers.layer_types._data import DataLayer, find_source
from keras_caffe.importers.layer_types.base import C3D, layer_type
from keras_caffe.importers.data.pipeline_core import (
    RecordOrder, epoch_permutation, positions, record_randoms)
from keras_caffe.importers.data.pipeline_images import check, text
from keras_caffe.importers.data.pipeline_layers import (
    Spec, batch_size, check_resized, check_tops, rand_skip_start)
from keras_caffe.importers.formats.protofile import read_binary
from keras_caffe.importers.net.weights import blob_to_array
from keras_caffe.proto import caffe_pb2

_CHANNELS = 3  # ReadImageSequenceToVolumeDatum reads CV_LOAD_IMAGE_COLOR
_DEPRECATED = ("scale", "mean_file", "crop_size", "mirror")
_warned = set()


class Clips:
    """A list file's clips: folders, second column (start or frame count),
    labels (float32 (n,) or multi-hot (n, K)) and line numbers."""

    def __init__(self, layer, path):
        p = layer.video_data_param
        self.path = path
        self.folders, self.second, labels, self.lines = [], [], [], []
        what = "'folder frame_count label" if p.use_temporal_jitter else "'folder start_frame label"
        what += "[,label...]'" if p.use_multiple_label else "'"
        for number, line in records.list_lines(layer, path):
            fields = line.split()
            try:
                if len(fields) != 3:
                    raise ValueError
                second = int(fields[1])
                label = ([int(v) for v in fields[2].split(",")] if p.use_multiple_label
                         else int(fields[2]))
            except ValueError:
                raise LayerError(layer.name, f"{path}:{number}: expected {what} (integers "
                                             f"after the folder), got {line!r}") from None
            if p.use_multiple_label and not all(0 <= v < p.num_of_labels for v in label):
                raise LayerError(layer.name, f"{path}:{number}: labels {fields[2]} must lie in "
                                             f"[0, num_of_labels = {p.num_of_labels})")
            self.folders.append(fields[0])
            self.second.append(second)
            labels.append(label)
            self.lines.append(number)
        if not self.folders:
            raise LayerError(layer.name, f"VideoData source {path!r} lists no clips")
        if p.use_multiple_label:
            self.labels = np.zeros((len(labels), p.num_of_labels), np.float32)
            for i, label in enumerate(labels):
                self.labels[i, label] = 1.0
        else:
            self.labels = np.asarray(labels, np.float32)

    def where(self, i):
        return f"{self.path}:{self.lines[i]}"


def check_parameters(layer):
    """The fork's set-up checks and what keras-caffe cannot do."""
    p = layer.video_data_param
    if not p.use_image:
        raise LayerError(layer.name, "(VideoData) video_data_param use_image is false: the "
                                     "clips are video files decoded with OpenCV, and "
                                     "keras-caffe has no video decoder; extract the frames "
                                     "first (folder/000001.jpg, ...) and set use_image: true")
    if p.new_length <= 0:
        raise LayerError(layer.name, f"(VideoData) video_data_param new_length must be "
                                     f"positive, got {p.new_length}")
    if (p.new_height > 0) != (p.new_width > 0):
        raise LayerError(layer.name, "(VideoData) new_height and new_width must be set together "
                                     f"(got {p.new_height} and {p.new_width})")
    if p.sampling_rate <= 0:
        raise LayerError(layer.name, "(VideoData) video_data_param sampling_rate must be "
                                     f"positive, got {p.sampling_rate}")
    if p.use_sampling_rate_jitter and p.max_sampling_rate <= 0:
        raise LayerError(layer.name, "(VideoData) video_data_param max_sampling_rate must be "
                                     f"positive, got {p.max_sampling_rate}")
    if p.use_multiple_label and not p.HasField("num_of_labels"):
        raise LayerError(layer.name, "(VideoData) video_data_param num_of_labels must be set "
                                     "together with use_multiple_label")
    if p.use_multiple_label and p.num_of_labels <= 0:
        raise LayerError(layer.name, "(VideoData) video_data_param num_of_labels must be "
                                     f"positive, got {p.num_of_labels}")
    t = layer.transform_param
    if t.HasField("mean_file") and len(t.mean_value):
        raise LayerError(layer.name, "(VideoData) transform_param: cannot specify mean_file and "
                                     "mean_value at the same time")
    if len(t.mean_value) not in (0, 1, _CHANNELS):
        raise LayerError(layer.name, f"(VideoData) transform_param has {len(t.mean_value)} "
                                     f"mean_value(s) for {_CHANNELS} channels: give 1 or "
                                     f"{_CHANNELS}")
    if t.force_gray or t.force_color:
        raise LayerError(layer.name, "(VideoData) transform_param force_color / force_gray "
                                     "apply to encoded Datums only (the frames are read in "
                                     "color)")
    ignored = [f for f in _DEPRECATED if p.HasField(f)]
    if ignored and layer.name not in _warned:
        _warned.add(layer.name)
        warnings.warn(f"layer {layer.name!r}: video_data_param {', '.join(ignored)} "
                      "is ignored, as C3D-v1.1 ignores it; give it in transform_param",
                      stacklevel=4)


def _rates(p):
    """The largest sampling rate a clip may use."""
    return p.max_sampling_rate if p.use_sampling_rate_jitter else p.sampling_rate


def _check_frame_counts(layer, clips):
    """With temporal jitter, every clip must hold ``new_length * rate`` frames
    (the fork skips a TRAIN clip that does not, and fails in TEST)."""
    p = layer.video_data_param
    need = p.new_length * _rates(p)
    for i, count in enumerate(clips.second):
        if count < need:
            raise LayerError(layer.name, f"{clips.where(i)}: the clip has {count} frames, "
                                         f"fewer than new_length * sampling_rate = {need} "
                                         "(use_temporal_jitter reads the second column as the "
                                         "clip's frame count)")


def _folder_base(layer, clips, root, net_source):
    """The directory relative clip folders are found from: the current
    directory (Caffe's), else the prototxt's, else the list file's."""
    first = root + clips.folders[0]
    if os.path.isabs(first):
        if os.path.isdir(first):
            return ""
        raise LayerError(layer.name, f"{clips.where(0)}: frame folder {first!r} not found")
    bases = [os.getcwd()]
    if net_source is not None and os.path.isfile(str(net_source)):
        bases.append(os.path.dirname(os.path.abspath(net_source)))
    bases.append(os.path.dirname(clips.path))
    for base in bases:
        if os.path.isdir(os.path.join(base, first)):
            return base
    raise LayerError(layer.name, f"{clips.where(0)}: frame folder {first!r} not found in "
                                 f"{', '.join(repr(b) for b in bases)}")


def frame_name(folder, number):
    """``sprintf("%s/%06d.jpg", folder, number)``."""
    return f"{folder}/{number:06d}.jpg"


def _first_start(p, clips):
    """The first frame the shapes are read from."""
    return 1 if p.use_temporal_jitter else clips.second[0]


def _read(layer, path, where):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise LayerError(layer.name, f"{where}: frame {text(path)!r} not found") from None
    except OSError as err:
        raise LayerError(layer.name, f"{where}: cannot read frame {text(path)!r}: "
                                     f"{err.strerror or err}") from None


def _first_frame(layer, p, clips, base):
    """The first clip's first frame, decoded and resized: (H, W, C) uint8."""
    path = os.path.join(base, frame_name(p.root_folder + clips.folders[0],
                                         _first_start(p, clips)))
    contents = _read(layer, path, clips.where(0))
    if not bool(images.known_format(contents)):
        raise LayerError(layer.name, f"{clips.where(0)}: cannot decode frame {path!r}: not a "
                                     "JPEG, PNG, GIF or BMP image")
    image = images.decode(tf.constant(contents), "color")
    if p.new_height:
        image = images.resize_linear(image, p.new_height, p.new_width)
    return image


def read_mean_volume(layer, path, net_source, shape):
    """The ``mean_file`` blob as a float32 (L, H, W, C) array, checked against
    the clips' (C, L, H, W) ``shape``."""
    found = records.find_source(layer, path, net_source, "mean_file")
    try:
        blob = read_binary(found, caffe_pb2.BlobProto)
        mean = blob_to_array(blob, found)
    except (OSError, ProtoParseError, WeightsError) as err:
        raise LayerError(layer.name, f"cannot read mean_file {found!r}: {err}") from None
    if mean.ndim == 5 and mean.shape[0] == 1:
        mean = mean[0]
    if mean.shape != tuple(shape):
        raise LayerError(layer.name, f"mean_file {found!r} has shape "
                                     f"{'x'.join(str(d) for d in mean.shape)} but the clips are "
                                     f"1x{'x'.join(str(d) for d in shape)} (a 1xCxLxHxW mean "
                                     "volume is needed)")
    return np.ascontiguousarray(np.transpose(mean, (1, 2, 3, 0)))


@layer_type("VideoData")
class VideoData(DataLayer):
    """VideoData (C3D-v1.1): clips of ``new_length`` frames from a list file.

    Shapes: data (N, 3, new_length, h, w), label (N,) or (N, num_of_labels)
    with ``use_multiple_label``; h x w is ``crop_size`` squared, else
    new_height x new_width, else the first listed clip's first frame's size
    (read from the file). See the module docstring for the pipeline. No
    example: the layer reads image files.
    """

    origin = C3D
    reads_source = True

    def source_shapes(self, layer, net_source):
        p = layer.video_data_param
        check_parameters(layer)
        crop = layer.transform_param.crop_size
        if p.new_height:
            height, width = p.new_height, p.new_width
        elif crop:
            height, width = crop, crop
        else:
            listing = find_source(layer, p.source, net_source)
            clips = Clips(layer, listing)
            base = _folder_base(layer, clips, p.root_folder, net_source)
            height, width = (int(d) for d in _first_frame(layer, p, clips, base).shape[:2])
        if crop:
            height, width = crop, crop
        label = (p.batch_size, p.num_of_labels) if p.use_multiple_label else (p.batch_size,)
        return [(p.batch_size, _CHANNELS, p.new_length, height, width), label]

    def pipeline(self, layer, ctx):
        p = layer.video_data_param
        check_tops(layer, 2, 2)
        check_parameters(layer)
        batch = batch_size(layer, p.batch_size)
        if p.new_height:
            check_resized(layer, ctx, batch, {layer.top[0]: (_CHANNELS, p.new_length,
                                                             p.new_height, p.new_width)})
        listing = records.find_source(layer, p.source, ctx.net_source)
        clips = Clips(layer, listing)
        if p.use_temporal_jitter:
            _check_frame_counts(layer, clips)
        base = _folder_base(layer, clips, p.root_folder, ctx.net_source)
        first = _first_frame(layer, p, clips, base)
        clip = _ClipTransform(layer, ctx, tuple(int(d) for d in first.shape))
        order = RecordOrder(len(clips.folders),
                            rand_skip_start(ctx, layer, p.rand_skip, len(clips.folders), False),
                            epoch_permutation(ctx.layer_seed(layer, "shuffle"),
                                              len(clips.folders)) if p.shuffle else None)
        folders = tf.constant(np.asarray([os.path.join(base, p.root_folder + f) + "/"
                                          for f in clips.folders], object))
        second = tf.constant(np.asarray(clips.second, np.int64))
        labels = tf.constant(clips.labels)
        reader = _frames_reader(layer, clips, p.new_length)
        seed = ctx.layer_seed(layer, "transform")
        length = p.new_length

        def load(g):
            indices = order(positions(g, batch))
            rand = record_randoms(seed, g, batch, count=5)
            starts, rates = _starts(p, ctx.train, tf.gather(second, indices), rand)
            numbers = starts[:, None] + rates[:, None] * tf.range(length, dtype=tf.int64)[None]
            names = tf.strings.join([tf.repeat(tf.gather(folders, indices), length),
                                     tf.strings.as_string(tf.reshape(numbers, [-1]), width=6,
                                                          fill="0"), ".jpg"])
            contents = tf.ensure_shape(
                tf.numpy_function(reader, [names, indices], tf.string), [batch * length])
            data = clip.batch(contents, names, indices, rand, batch)
            return {layer.top[0]: ctx.to_model(data), layer.top[1]: tf.gather(labels, indices)}

        channels, height, width = clip.bind_shape
        shapes = {layer.top[0]: ctx.model_shape((batch, channels, length, height, width)),
                  layer.top[1]: (batch, *clips.labels.shape[1:])}
        return Spec(batch, len(clips.folders), shapes, load)


def _starts(p, train, second, rand):
    """Each clip's first frame and sampling rate (int64 (B,) each)."""
    if p.use_sampling_rate_jitter:  # caffe_rng_rand() % max_sampling_rate + 1
        rates = _draw(rand[:, 3], tf.constant(p.max_sampling_rate, tf.int64)) + 1
    else:
        rates = tf.fill(tf.shape(second), tf.constant(p.sampling_rate, tf.int64))
    if not p.use_temporal_jitter:
        return second, rates
    if not train:
        return tf.zeros_like(second), rates
    return _draw(rand[:, 4], second - p.new_length * rates + 1) + 1, rates


def _draw(u, count):
    """An integer in [0, count) from a uniform [0, 1) number (int64)."""
    count = tf.cast(count, tf.int64)
    drawn = tf.cast(tf.floor(tf.cast(u, tf.float64) * tf.cast(count, tf.float64)), tf.int64)
    return tf.minimum(drawn, count - 1)


def _frames_reader(layer, clips, length):
    """Read a batch's frame files in ``tf.numpy_function``; a missing frame
    raises the LayerError naming the list line (through ``data_errors.fail``)."""
    def read(names, indices):
        out = np.empty(len(names), object)
        try:
            for k, name in enumerate(names):
                out[k] = _read(layer, text(name), clips.where(int(indices[k // length])))
        except LayerError as err:
            data_errors.fail(err)
        return out

    return read


class _ClipTransform:
    """Decode, resize and transform a batch's frames into (B, C, L, h, w)."""

    def __init__(self, layer, ctx, first_shape):
        p, t = layer.video_data_param, layer.transform_param
        self.layer, self.length = layer.name, p.new_length
        self.resize = (p.new_height, p.new_width) if p.new_height else None
        self.source_shape = first_shape  # (H, W, C) of the first frame
        height, width, _ = first_shape
        self.crop = int(t.crop_size)
        self.train = ctx.train
        self.mirror = bool(t.mirror) and self.train
        if t.mirror and not self.train and layer.name not in _warned:
            _warned.add(layer.name)
            warnings.warn(f"layer {layer.name!r}: mirror is applied in TRAIN only; TEST "
                          "batches are not flipped", stacklevel=4)
        self.scale = float(np.float32(t.scale))
        self.mean = None
        if t.HasField("mean_file"):
            self.mean = read_mean_volume(layer, t.mean_file, ctx.net_source,
                                         (_CHANNELS, self.length, height, width))
        values = np.asarray(t.mean_value, np.float32)
        self.mean_values = (np.broadcast_to(values, (_CHANNELS,)).astype(np.float32)
                            if len(values) else None)
        if self.crop > height or self.crop > width:
            raise LayerError(layer.name, f"crop_size {self.crop} is larger than the "
                                         f"{height}x{width} frames")
        side = self.crop or None
        self.bind_shape = (_CHANNELS, side or height, side or width)

    def _fixed(self):
        """Whether every clip must have the first one's size (no crop, or a mean_file)."""
        return not self.crop or self.mean is not None

    def _decode(self, contents):
        image = images.decode(contents, "color")
        return images.resize_linear(image, *self.resize) if self.resize else image

    def batch(self, contents, names, indices, rand, batch):
        length = self.length
        known = images.known_format(contents)

        def unknown(names, ok):
            return LayerError(self.layer, f"frame {text(names[int(np.argmin(ok))])!r} is not a "
                                          "JPEG, PNG, GIF or BMP image")

        with tf.control_dependencies([check(tf.reduce_all(known), unknown, [names, known])]):
            contents = tf.identity(contents)
        clip_rand = tf.repeat(rand, length, axis=0)
        position = tf.tile(tf.range(length), [batch])
        channels, height, width = self.bind_shape
        specs = (tf.TensorSpec((height, width, channels), tf.float32),
                 tf.TensorSpec([2], tf.int64))
        out, sizes = tf.map_fn(lambda item: self._one(*item), (contents, clip_rand, position),
                               fn_output_signature=specs)
        clip_sizes = tf.reshape(sizes, [batch, length, 2])
        same = tf.reduce_all(tf.equal(clip_sizes, clip_sizes[:, :1]), axis=[1, 2])
        ok = tf.reshape(self._size_ok(sizes), [batch, length])
        ok = tf.reduce_all(ok, axis=1) & same
        report = self._wrong_size(length)
        with tf.control_dependencies([check(tf.reduce_all(ok), report,
                                            [names, clip_sizes, ok, same])]):
            out = tf.identity(out)
        # (B * L, h, w, C) -> (B, C, L, h, w)
        return tf.transpose(tf.reshape(out, [batch, length, height, width, channels]),
                            [0, 4, 1, 2, 3])

    def _size_ok(self, sizes):
        height, width, _ = self.source_shape
        if self._fixed():
            return tf.equal(sizes[:, 0], height) & tf.equal(sizes[:, 1], width)
        return (sizes[:, 0] >= self.crop) & (sizes[:, 1] >= self.crop)

    def _wrong_size(self, length):
        height, width, _ = self.source_shape

        def report(names, sizes, ok, same):
            i = int(np.argmin(ok))
            clip = [text(n) for n in names[i * length:(i + 1) * length]]
            if not same[i]:
                k = int(np.argmax(np.any(sizes[i] != sizes[i, :1], axis=1)))
                return LayerError(self.layer, f"frame {clip[k]!r} is "
                                              f"{sizes[i, k, 0]}x{sizes[i, k, 1]} but "
                                              f"{clip[0]!r}, the clip's first, is "
                                              f"{sizes[i, 0, 0]}x{sizes[i, 0, 1]}; the frames "
                                              "of a clip must have one size")
            need = (f"{height}x{width} like the first clip" if self._fixed() else
                    f"at least {self.crop}x{self.crop} for crop_size {self.crop}")
            return LayerError(self.layer, f"frame {clip[0]!r} is {sizes[i, 0, 0]}x"
                                          f"{sizes[i, 0, 1]} (HxW); it must be {need}")

        return report

    def _one(self, contents, rand, position):
        image = self._decode(contents)
        size = tf.shape(image, out_type=tf.int64)[:2]
        channels, height, width = self.bind_shape
        ok = self._size_ok(size[None])[0]
        out = tf.cond(ok, lambda: self._transform(image, rand, position),
                      lambda: tf.zeros((height, width, channels)))
        return out, size

    def _transform(self, image, rand, position):
        """One frame (H, W, C) of a clip: its clip's crop offset and flip."""
        x = tf.cast(image, tf.float32)
        if self.mean is not None:
            x = x - tf.gather(tf.constant(self.mean), position)
        elif self.mean_values is not None:
            x = x - tf.constant(self.mean_values)
        if self.crop:
            shape = tf.shape(x)
            if self.train:
                h_off = tf.cast(_draw(rand[0], shape[0] - self.crop + 1), tf.int32)
                w_off = tf.cast(_draw(rand[1], shape[1] - self.crop + 1), tf.int32)
            else:
                h_off, w_off = (shape[0] - self.crop) // 2, (shape[1] - self.crop) // 2
            x = tf.slice(x, [h_off, w_off, 0], [self.crop, self.crop, -1])
        if self.mirror:
            x = tf.cond(rand[2] < 0.5, lambda: tf.reverse(x, [1]), lambda: x)
        return x if self.scale == 1.0 else x * tf.constant(self.scale, tf.float32)
