"""Shape and routing layers: Slice, Flatten, Reshape, Crop, Tile, Silence, Concat,
Split, Softmax, Input; one- or two-layer nets against numpy ports of Caffe's code.

Besides the values, the tests check the layouts the importer keeps: a
channels-last image flattened from axis 1 is a "flat" blob, and reshapes
that keep the batch and channel axes need no transposes.
"""

import math

import keras
import numpy as np
import pytest

from keras_caffe.errors import LayerError
from keras_caffe.importers import import_model
from keras_caffe.importers.net.graph import build_model
from keras_caffe.importers.formats.netfile import filter_net, net_state, read_net
from keras_caffe.layers import shape as shape_layers
from support import DATA_FORMATS, from_keras_layout, run_layers, to_keras_layout

RNG = np.random.RandomState(0)


def randn(*shape):
    return RNG.randn(*shape).astype("float32")


def layer_text(type_, name, bottoms, tops, param=None, **fields):
    """One layer's prototxt; ``fields`` go into ``<param>_param`` (lists repeat)."""
    bottoms = [bottoms] if isinstance(bottoms, str) else bottoms
    tops = [tops] if isinstance(tops, str) else tops
    text = f'layer {{ name: "{name}" type: "{type_}" '
    text += "".join(f'bottom: "{b}" ' for b in bottoms)
    text += "".join(f'top: "{t}" ' for t in tops)
    if param:
        body = ""
        for key, value in fields.items():
            for v in value if isinstance(value, (list, tuple)) else [value]:
                body += f"{key}: {v} "
        text += f"{param}_param {{ {body}}} "
    return text + "}\n"


def input_text(inputs):
    shapes = "".join(f"shape {{ {' '.join(f'dim: {d}' for d in np.shape(a))} }} "
                     for a in inputs.values())
    tops = "".join(f'top: "{name}" ' for name in inputs)
    return f'layer {{ name: "input" type: "Input" {tops}input_param {{ {shapes}}} }}\n'


def build(layers_text, inputs, data_format):
    """(model, {blob: Blob}) for the layers after an Input of ``inputs``."""
    param, source = read_net(input_text(inputs) + layers_text)
    return build_model(filter_net(param, net_state("TEST")), source=source,
                       data_format=data_format)


def transposes(model):
    return [layer.name for layer in model.layers if isinstance(layer, keras.layers.Permute)]


def flatten_text(name="flat", bottom="data", top=None, **fields):
    return layer_text("Flatten", name, bottom, top or name, "flatten" if fields else None,
                      **fields)


def reshape_text(dims, name="r", bottom="data", top=None, **fields):
    shape = "shape { " + " ".join(f"dim: {d}" for d in dims) + " } "
    extra = "".join(f"{k}: {v} " for k, v in fields.items())
    return (f'layer {{ name: "{name}" type: "Reshape" bottom: "{bottom}" top: "{top or name}" '
            f"reshape_param {{ {shape}{extra}}} }}\n")


def ip_text(name, bottom, num_output, axis=1):
    return layer_text("InnerProduct", name, bottom, name, "inner_product",
                      num_output=num_output, axis=axis)


# -- Flatten -----------------------------------------------------------------------


def flatten_reference(x, axis=1, end_axis=-1):
    """Caffe's FlattenLayer::Reshape shape; the data is shared (row-major)."""
    rank = x.ndim
    start, end = axis % rank, end_axis % rank
    shape = (*x.shape[:start], int(np.prod(x.shape[start:end + 1])), *x.shape[end + 1:])
    return x.reshape(shape)


FLATTEN_CASES = {
    "default": ((2, 3, 4, 5), {}),
    "spatial": ((2, 3, 4, 5), dict(axis=2)),
    "channels_and_height": ((2, 3, 4, 5), dict(axis=1, end_axis=2)),
    "negative_axes": ((2, 3, 4, 5), dict(axis=-3, end_axis=-2)),
    "one_axis": ((2, 3, 4, 5), dict(axis=2, end_axis=2)),
    "inserts_unit_axis": ((2, 3, 4, 5), dict(axis=1, end_axis=0)),
    "inserts_unit_axis_spatial": ((2, 3, 4, 5), dict(axis=3, end_axis=2)),
    "one_by_one": ((2, 6, 1, 1), {}),
    "3d": ((2, 3, 7), {}),
    "5d": ((2, 3, 2, 3, 4), {}),
    "5d_spatial": ((2, 3, 2, 3, 4), dict(axis=2, end_axis=3)),
    "2d": ((2, 6), {}),
    "3d_from_axis_2": ((2, 3, 7), dict(axis=2)),
}


@pytest.mark.layer_type("Flatten")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", list(FLATTEN_CASES))
def test_flatten(case, data_format):
    shape, p = FLATTEN_CASES[case]
    x = randn(*shape)
    text = flatten_text(**p) + layer_text("ReLU", "relu", "flat", "out")
    y = run_layers(text, {"data": x}, data_format=data_format)["out"]
    expected = np.maximum(flatten_reference(x, p.get("axis", 1), p.get("end_axis", -1)), 0)
    assert y.shape == expected.shape
    np.testing.assert_array_equal(y, expected)


@pytest.mark.layer_type("Flatten")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 3, 7), (2, 3, 2, 3, 4), (2, 5, 1, 1)])
def test_flatten_into_inner_product(shape, data_format):
    """The flattened image feeds an InnerProduct whose rows are in Caffe's C, H, W order."""
    x = randn(*shape)
    k = int(np.prod(shape[1:]))
    w, b = randn(4, k), randn(4)
    text = flatten_text() + ip_text("ip", "flat", 4)
    y = run_layers(text, {"data": x}, {"ip": [w, b]}, data_format)["ip"]
    np.testing.assert_allclose(y, x.reshape(2, -1) @ w.T + b, rtol=1e-5, atol=1e-5)


@pytest.mark.layer_type("Flatten")
def test_flatten_channels_last_image_is_flat_without_transpose():
    x = randn(2, 3, 4, 5)
    model, blobs = build(flatten_text(), {"data": x}, "channels_last")
    assert blobs["flat"].layout == "flat" and blobs["flat"].chw == (3, 4, 5)
    assert transposes(model) == ["flat_to_nchw"]  # only the model output goes to Caffe's order
    y = keras.ops.convert_to_numpy(model(to_keras_layout(x, "channels_last")))
    np.testing.assert_array_equal(y, x.reshape(2, -1))
    # Caffe's order inside the net is only built when asked for.
    model, blobs = build(flatten_text() + ip_text("ip", "flat", 3), {"data": x}, "channels_last")
    assert transposes(model) == []


@pytest.mark.layer_type("Flatten")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_flatten_twice_and_of_the_batch_axis_alone_are_identities(data_format):
    x = randn(2, 3, 4, 5)
    text = (flatten_text() + flatten_text("flat2", "flat") + flatten_text("f0", "data", axis=0,
                                                                          end_axis=0))
    model, blobs = build(text, {"data": x}, data_format)
    assert blobs["flat2"] is blobs["flat"] and blobs["f0"] is blobs["data"]
    y = run_layers(text + layer_text("ReLU", "relu", "f0", "out"), {"data": x},
                   data_format=data_format)
    np.testing.assert_array_equal(y["flat2"], x.reshape(2, -1))
    np.testing.assert_array_equal(y["out"], np.maximum(x, 0))


@pytest.mark.layer_type("Flatten")
@pytest.mark.parametrize("fields, message", [
    (dict(axis=4), "axis 4 is out of range for a 4-D input"),
    (dict(axis=-5), "axis -5 is out of range for a 4-D input"),
    (dict(end_axis=4), "end_axis 4 is out of range"),
    (dict(axis=3, end_axis=1), "end_axis 1 comes before axis 3"),
    (dict(axis=0), "flattening the batch axis"),
])
def test_flatten_bad_parameters(fields, message):
    with pytest.raises(LayerError, match=rf"layer 'flat': \(Flatten\) {message}"):
        run_layers(flatten_text(**fields), {"data": np.zeros((2, 3, 4, 5))})


@pytest.mark.layer_type("Flatten")
def test_flatten_in_place_is_refused():
    with pytest.raises(LayerError, match=r"layer 'flat': \(Flatten\) does not allow in-place"):
        run_layers(flatten_text(bottom="data", top="data"), {"data": np.zeros((2, 3, 4, 5))})


# -- Reshape -----------------------------------------------------------------------


def reshape_reference(x, dims, axis=0, num_axes=-1):
    """Caffe's ReshapeLayer::Reshape top shape for a known batch; data is row-major."""
    shape = list(x.shape)
    start = axis if axis >= 0 else len(shape) + axis + 1
    end = len(shape) if num_axes == -1 else start + num_axes
    top = shape[:start] + list(dims) + shape[end:]
    for i, d in enumerate(dims):
        if d == 0:
            top[start + i] = shape[start + i]
    if -1 in dims:
        i = start + list(dims).index(-1)
        top[i] = x.size // int(np.prod([d for j, d in enumerate(top) if j != i]))
    return x.reshape(top)


RESHAPE_CASES = {
    # name: (input shape, dims, fields, transposes in channels_last (None: not checked))
    "flatten_all": ((2, 3, 4, 5), (0, -1), {}, 1),                # a flat output, to Caffe's order
    "keep_channels": ((2, 3, 4, 5), (0, 0, -1), {}, 0),
    "keep_channels_explicit": ((2, 3, 4, 5), (0, 3, 2, 10), {}, 0),
    "channels_to_one": ((2, 6, 1, 1), (0, -1), {}, 0),
    "regroup_channels": ((2, 6, 4, 5), (0, 2, -1, 5), {}, 2),     # Faster R-CNN's rpn reshape
    "ssd_boxes": ((2, 8, 3, 5), (0, -1, 4), {}, 2),
    "batch_inferred": ((2, 3, 4, 5), (-1, 12, 5), {}, None),
    "batch_written": ((1, 3, 4, 5), (1, 6, -1), {}, None),           # a deploy net's batch 1
    "batch_written_no_inference": ((2, 3, 4, 5), (2, 6, 10), {}, None),
    "axis_1_num_axes_1": ((2, 3, 4, 5), (3, 1), dict(axis=1, num_axes=1), 0),
    "axis_2": ((2, 3, 4, 5), (-1,), dict(axis=2), 0),
    "append_unit_axis": ((2, 3, 4, 5), (1,), dict(axis=-1, num_axes=0), 0),
    "insert_before_channels": ((2, 3, 4, 5), (1,), dict(axis=1, num_axes=0), 2),
    "copies_beyond_the_replaced_axes": ((2, 3, 4, 5), (0, 0, -1), dict(axis=1, num_axes=2), 0),
    "negative_axis_spatial": ((2, 3, 4, 6), (2, 3), dict(axis=-2, num_axes=1), 0),
    "batch_copied_only": ((2, 3, 4, 5), (0,), dict(axis=0, num_axes=1), 0),
    "2d_to_image": ((2, 12), (0, 3, 2, 2), {}, 1),
    "2d_to_2d": ((2, 12), (0, 4, 3), {}, 1),
    "3d": ((2, 4, 6), (0, 0, 2, 3), {}, 0),
    "5d_to_4d": ((2, 3, 2, 3, 4), (0, 0, 6, 4), {}, 0),
}


@pytest.mark.layer_type("Reshape")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", list(RESHAPE_CASES))
def test_reshape(case, data_format):
    shape, dims, fields, n_transposes = RESHAPE_CASES[case]
    x = randn(*shape)
    text = reshape_text(dims, **fields) + layer_text("ReLU", "relu", "r", "out")
    y = run_layers(text, {"data": x}, data_format=data_format)["out"]
    expected = np.maximum(reshape_reference(x, dims, fields.get("axis", 0),
                                            fields.get("num_axes", -1)), 0)
    assert y.shape == expected.shape
    np.testing.assert_array_equal(y, expected)
    if n_transposes is not None and data_format == "channels_last":
        model, _ = build(text, {"data": x}, data_format)
        assert len(transposes(model)) == n_transposes, transposes(model)


@pytest.mark.layer_type("Reshape")
def test_reshape_batch_stays_free():
    """A batch written as 1 (or inferred) still runs any batch size."""
    x = randn(3, 3, 4, 5)
    for dims in [(1, 6, -1), (-1, 60), (0, 60)]:
        model = import_model(input_text({"data": x[:1]}) + reshape_text(dims),
                             data_format="channels_first")
        y = keras.ops.convert_to_numpy(model(x))
        np.testing.assert_array_equal(y, x.reshape(3, *reshape_reference(x[:1], dims).shape[1:]))


@pytest.mark.layer_type("Reshape")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_reshape_flat_blob_back_to_its_image_and_onwards(data_format):
    """Flatten then Reshape back: no transposes; Reshape of a flat blob to a new grouping."""
    x = randn(2, 3, 4, 5)
    text = (flatten_text() + reshape_text((0, 3, 4, 5), "back", "flat")
            + reshape_text((0, 6, 10), "other", "flat"))
    y = run_layers(text, {"data": x}, data_format=data_format)
    np.testing.assert_array_equal(y["back"], x)
    np.testing.assert_array_equal(y["other"], x.reshape(2, 6, 10))
    if data_format == "channels_last":
        model, blobs = build(flatten_text() + reshape_text((0, 3, 4, 5), "back", "flat"),
                             {"data": x}, data_format)
        assert blobs["back"].layout == "nhwc" and transposes(model) == []


@pytest.mark.layer_type("Reshape")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_reshape_to_image_feeds_convolution(data_format):
    """A (N, C*H*W) vector reshaped to an image is convolved in Caffe's order."""
    x = randn(2, 12)
    w, b = randn(2, 3, 1, 1), randn(2)
    text = reshape_text((0, 3, 2, 2)) + layer_text(
        "Convolution", "conv", "r", "conv", "convolution", num_output=2, kernel_size=1)
    y = run_layers(text, {"data": x}, {"conv": [w, b]}, data_format)["conv"]
    image = x.reshape(2, 3, 2, 2)
    expected = np.einsum("nchw,oc->nohw", image, w[:, :, 0, 0]) + b[None, :, None, None]
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.layer_type("Reshape")
@pytest.mark.parametrize("dims, fields, message", [
    ((0, -1, -1), {}, r"shape \[0, -1, -1\] has several -1 dims"),
    ((0, 0, 0, 0, 0), {}, r"has a 0 \(copy\) at dim 4 but the input \(N, 3, 4, 5\) has no "
                          r"axis 4"),
    ((0, 7, -1), {}, r"count per sample \(60\) is not divisible by the product of the specified "
                     r"dims \(7\)"),
    ((0, 7, 8), {}, r"output shape \(N, 7, 8\) does not hold the input's \(N, 3, 4, 5\) values"),
    ((-1, 30), {}, "changes the batch axis"),
    ((2, 30), {}, "changes the batch axis"),
    ((2, -1), {}, "fixes the batch at 2 and infers another axis"),
    ((0, -2), {}, "negative dim other than -1"),
    ((1,), dict(axis=0, num_axes=0), "inserts axes \\[1\\] before the batch axis"),
    ((), dict(axis=0, num_axes=1), "removes the batch axis"),
    ((-1,), dict(axis=5), "axis 5 is out of range for a 4-D input"),
    ((-1,), dict(axis=-6), "axis -6 is out of range for a 4-D input"),
    ((-1,), dict(num_axes=-2), "num_axes must be >= 0, or -1 for all"),
    ((-1,), dict(axis=2, num_axes=3), "axis \\+ num_axes = 5 is past the 4 axes"),
])
def test_reshape_bad_parameters(dims, fields, message):
    with pytest.raises(LayerError, match=rf"layer 'r': \(Reshape\) .*{message}"):
        run_layers(reshape_text(dims, **fields), {"data": np.zeros((2, 3, 4, 5))})


@pytest.mark.layer_type("Reshape")
def test_reshape_in_place_is_refused():
    with pytest.raises(LayerError, match=r"layer 'r': \(Reshape\) does not allow in-place"):
        run_layers(reshape_text((0, -1), top="data"), {"data": np.zeros((2, 3, 4, 5))})


# -- Slice -------------------------------------------------------------------------


def slice_reference(x, axis, points, tops):
    """Caffe's SliceLayer::Forward_cpu: (outer, axis, inner) blocks copied per top."""
    size = x.shape[axis]
    sizes = (np.diff([0, *points, size]) if points else [size // tops] * tops)
    outer, inner = int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis + 1:]))
    blocks = x.reshape(outer, size, inner)
    out, offset = [], 0
    for s in sizes:
        shape = list(x.shape)
        shape[axis] = s
        out.append(blocks[:, offset:offset + s, :].reshape(shape))
        offset += s
    return out


SLICE_CASES = {
    # name: (input shape, fields, tops, caffe axis)
    "channels_equal": ((2, 6, 4, 5), dict(axis=1), 3, 1),
    "channels_points": ((2, 6, 4, 5), dict(axis=1, slice_point=[1, 4]), 3, 1),
    "default_axis": ((2, 6, 4, 5), dict(slice_point=[2]), 2, 1),
    "legacy_slice_dim": ((2, 6, 4, 5), dict(slice_dim=1, slice_point=[2]), 2, 1),
    "legacy_slice_dim_2": ((2, 6, 4, 5), dict(slice_dim=2, slice_point=[1, 3]), 3, 2),
    "height": ((2, 6, 4, 5), dict(axis=2, slice_point=[1]), 2, 2),
    "width_negative_equal": ((2, 6, 4, 5), dict(axis=-1), 5, 3),
    "batch_points": ((3, 2, 2, 2), dict(axis=0, slice_point=[1]), 2, 0),
    "batch_equal": ((4, 2, 2, 2), dict(axis=0), 2, 0),
    "2d": ((2, 10), dict(axis=1, slice_point=[3, 4]), 3, 1),
    "3d_last": ((2, 3, 8), dict(axis=2), 4, 2),
}


@pytest.mark.layer_type("Slice")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", list(SLICE_CASES))
def test_slice(case, data_format):
    shape, fields, n_tops, axis = SLICE_CASES[case]
    x = randn(*shape)
    tops = [f"s{i}" for i in range(n_tops)]
    y = run_layers(layer_text("Slice", "slice", "data", tops, "slice", **fields), {"data": x},
                   data_format=data_format)
    expected = slice_reference(x, axis, fields.get("slice_point", []), n_tops)
    for top, e in zip(tops, expected):
        assert y[top].shape == e.shape
        np.testing.assert_array_equal(y[top], e)


@pytest.mark.layer_type("Slice")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_slice_flat_blob_and_layouts(data_format):
    """A flat blob is sliced in Caffe's C, H, W order; image slices keep the image layout."""
    x = randn(2, 3, 2, 2)
    text = flatten_text() + layer_text("Slice", "slice", "flat", ["a", "b"], "slice",
                                       slice_point=5)
    text += layer_text("Slice", "img", "data", ["c", "d"], "slice", axis=1, slice_point=1)
    model, blobs = build(text, {"data": x}, data_format)
    assert blobs["c"].layout == ("nhwc" if data_format == "channels_last" else "caffe")
    y = run_layers(text, {"data": x}, data_format=data_format)
    np.testing.assert_array_equal(y["a"], x.reshape(2, -1)[:, :5])
    np.testing.assert_array_equal(y["b"], x.reshape(2, -1)[:, 5:])
    np.testing.assert_array_equal(y["c"], x[:, :1])
    np.testing.assert_array_equal(y["d"], x[:, 1:])


@pytest.mark.layer_type("Slice")
def test_slice_one_top_is_the_bottom():
    x = randn(2, 4, 3, 3)
    text = layer_text("Slice", "slice", "data", "s", "slice", axis=1) + layer_text(
        "ReLU", "relu", "s", "out")
    _, blobs = build(text, {"data": x}, "channels_last")
    assert blobs["s"] is blobs["data"]
    np.testing.assert_array_equal(run_layers(text, {"data": x})["out"], np.maximum(x, 0))


@pytest.mark.layer_type("Slice")
def test_slice_batch_equal_split_at_run_time():
    """An equal split of the batch axis follows the batch size fed."""
    x = randn(6, 2, 3)
    model = import_model(input_text({"data": x[:2]})
                         + layer_text("Slice", "slice", "data", ["a", "b"], "slice", axis=0),
                         data_format="channels_first")
    y = model(x)
    np.testing.assert_array_equal(y["a"], x[:3])
    np.testing.assert_array_equal(y["b"], x[3:])


@pytest.mark.layer_type("Slice")
@pytest.mark.parametrize("fields, tops, message", [
    (dict(axis=1, slice_dim=1), 2, "give either axis or slice_dim, not both"),
    (dict(slice_point=[1, 2]), 2, "2 slice points for 2 tops; give 1"),
    (dict(slice_point=[3, 2]), 3, r"slice points \[3, 2\] must be positive and increasing"),
    (dict(slice_point=[0]), 2, r"slice points \[0\] must be positive and increasing"),
    (dict(slice_point=[6]), 2, r"slice point 6 is not inside axis 1 of the input \(N, 6, 4, 5\)"),
    (dict(axis=2), 3, r"3 tops do not evenly divide axis 2 of the input \(N, 6, 4, 5\)"),
    (dict(axis=4), 2, "axis 4 is out of range for a 4-D input"),
    (dict(slice_dim=4), 2, "slice_dim 4 is out of range for a 4-D input"),
])
def test_slice_bad_parameters(fields, tops, message):
    text = layer_text("Slice", "slice", "data", [f"s{i}" for i in range(tops)], "slice", **fields)
    with pytest.raises(LayerError, match=rf"layer 'slice': \(Slice\) {message}"):
        run_layers(text, {"data": np.zeros((2, 6, 4, 5))})


# -- Crop --------------------------------------------------------------------------


def crop_reference(x, ref_shape, axis=2, offsets=()):
    """Caffe's CropLayer::Reshape offsets and sizes; crop_copy copies the window."""
    index = []
    for i in range(x.ndim):
        if i < axis % x.ndim:
            index.append(slice(None))
            continue
        offset = offsets[0] if len(offsets) == 1 else (offsets[i - axis % x.ndim] if offsets else 0)
        index.append(slice(offset, offset + ref_shape[i]))
    return x[tuple(index)]


CROP_CASES = {
    # name: (data shape, reference shape, fields)
    "default": ((2, 3, 8, 9), (2, 1, 5, 4), {}),
    "one_offset": ((2, 3, 8, 9), (2, 1, 5, 4), dict(offset=1)),
    "fcn": ((1, 4, 30, 30), (1, 3, 22, 22), dict(axis=2, offset=4)),
    "offset_per_axis": ((2, 3, 8, 9), (2, 1, 5, 4), dict(offset=[2, 3])),
    "channels_too": ((2, 5, 8, 9), (2, 2, 5, 4), dict(axis=1, offset=[1, 2, 3])),
    "channels_one_offset": ((2, 5, 8, 9), (2, 2, 5, 4), dict(axis=1, offset=2)),
    "negative_axis": ((2, 3, 8, 9), (2, 3, 8, 4), dict(axis=-1, offset=5)),
    "reference_same_height": ((2, 3, 8, 9), (2, 3, 8, 4), dict(axis=2, offset=[0, 1])),
    "2d": ((2, 10), (2, 4), dict(axis=1, offset=3)),
    "3d": ((2, 5, 7), (2, 3, 2), dict(axis=1, offset=[1, 4])),
    "batch": ((3, 2, 4, 4), (1, 2, 2, 2), dict(axis=0, offset=[1, 0, 1, 2])),
}


@pytest.mark.layer_type("Crop")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", list(CROP_CASES))
def test_crop(case, data_format):
    shape, ref_shape, fields = CROP_CASES[case]
    x, ref = randn(*shape), randn(*ref_shape)
    text = layer_text("Crop", "crop", ["data", "ref"], "crop", "crop" if fields else None, **fields)
    y = run_layers(text, {"data": x, "ref": ref}, data_format=data_format)["crop"]
    offsets = fields.get("offset", [])
    expected = crop_reference(x, ref_shape, fields.get("axis", 2),
                              offsets if isinstance(offsets, list) else [offsets])
    assert y.shape == expected.shape
    np.testing.assert_array_equal(y, expected)


@pytest.mark.layer_type("Crop")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_crop_flat_and_image_layouts(data_format):
    """A flat blob is cropped in Caffe's order; the reference's layout does not matter."""
    x = randn(2, 3, 2, 2)
    ref = randn(2, 4, 1, 2)
    text = (flatten_text() + flatten_text("ref_flat", "ref")
            + layer_text("Crop", "crop", ["flat", "ref_flat"], "crop", "crop", axis=1, offset=2)
            + layer_text("Crop", "crop_img", ["data", "ref"], "crop_img", "crop", axis=2,
                         offset=[1, 0]))
    y = run_layers(text, {"data": x, "ref": ref}, data_format=data_format)
    np.testing.assert_array_equal(y["crop"], x.reshape(2, -1)[:, 2:10])
    np.testing.assert_array_equal(y["crop_img"], x[:, :, 1:2, 0:2])


@pytest.mark.layer_type("Crop")
def test_crop_to_the_same_shape_is_the_bottom():
    x = randn(2, 3, 4, 4)
    text = layer_text("Crop", "crop", ["data", "ref"], "crop") + layer_text(
        "ReLU", "relu", "crop", "out")
    _, blobs = build(text, {"data": x, "ref": randn(2, 3, 4, 4)}, "channels_last")
    assert blobs["crop"] is blobs["data"]


@pytest.mark.layer_type("Crop")
@pytest.mark.parametrize("ref_shape, fields, message", [
    ((2, 3, 5, 4), dict(offset=[1, 2, 3]), "3 offsets for the 2 axes from axis 2 of the 4-D input"),
    ((2, 3, 5, 4), dict(offset=4), r"the crop of axis 2 \(size 5 at offset 4\) does not fit in "
                                   r"the input \(N, 3, 8, 9\)"),
    ((2, 3, 9, 4), {}, r"the crop of axis 2 \(size 9 at offset 0\) does not fit"),
    ((2, 3, 5), dict(axis=1), r"the reference blob \(N, 3, 5\) has fewer axes than the input"),
    ((2, 3, 5, 4), dict(axis=4), "axis 4 is out of range for a 4-D input"),
])
def test_crop_bad_parameters(ref_shape, fields, message):
    text = layer_text("Crop", "crop", ["data", "ref"], "crop", "crop" if fields else None,
                      **fields)
    with pytest.raises(LayerError, match=rf"layer 'crop': \(Crop\) {message}"):
        run_layers(text, {"data": np.zeros((2, 3, 8, 9)), "ref": np.zeros(ref_shape)})


@pytest.mark.layer_type("Crop")
def test_crop_needs_two_bottoms():
    with pytest.raises(LayerError, match=r"layer 'crop': \(Crop\) takes 2 bottoms"):
        run_layers(layer_text("Crop", "crop", "data", "crop"), {"data": np.zeros((2, 3, 8, 9))})


# -- Tile --------------------------------------------------------------------------


def tile_reference(x, axis, tiles):
    """Caffe's TileLayer::Forward_cpu: each outer block copied ``tiles`` times."""
    axis %= x.ndim
    outer, inner = int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:]))
    shape = list(x.shape)
    shape[axis] *= tiles
    return np.tile(x.reshape(outer, 1, inner), (1, tiles, 1)).reshape(shape)


TILE_CASES = {
    "channels": ((2, 3, 2, 4), dict(tiles=2), 1),
    "height": ((2, 3, 2, 4), dict(axis=2, tiles=3), 2),
    "width_negative": ((2, 3, 2, 4), dict(axis=-1, tiles=2), 3),
    "batch": ((2, 3, 2, 2), dict(axis=0, tiles=3), 0),
    "2d": ((2, 5), dict(axis=1, tiles=4), 1),
    "3d": ((2, 3, 4), dict(axis=2, tiles=2), 2),
    "one_tile": ((2, 3, 2, 4), dict(tiles=1), 1),
}


@pytest.mark.layer_type("Tile")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", list(TILE_CASES))
def test_tile(case, data_format):
    shape, fields, axis = TILE_CASES[case]
    x = randn(*shape)
    text = layer_text("Tile", "tile", "data", "tile", "tile", **fields) + layer_text(
        "ReLU", "relu", "tile", "out")
    y = run_layers(text, {"data": x}, data_format=data_format)["out"]
    expected = np.maximum(tile_reference(x, axis, fields["tiles"]), 0)
    assert y.shape == expected.shape
    np.testing.assert_array_equal(y, expected)


@pytest.mark.layer_type("Tile")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_tile_flat_blob(data_format):
    x = randn(2, 3, 2, 2)
    text = flatten_text() + layer_text("Tile", "tile", "flat", "tile", "tile", tiles=2)
    y = run_layers(text, {"data": x}, data_format=data_format)["tile"]
    np.testing.assert_array_equal(y, tile_reference(x.reshape(2, -1), 1, 2))


@pytest.mark.layer_type("Tile")
@pytest.mark.parametrize("fields, message", [
    ({"axis": 1}, "tile_param.tiles .* is required"),
    ({"tiles": 0}, "tiles must be positive, got 0"),
    ({"tiles": -2}, "tiles must be positive, got -2"),
    ({"axis": 4, "tiles": 2}, "axis 4 is out of range for a 4-D input"),
])
def test_tile_bad_parameters(fields, message):
    with pytest.raises(LayerError, match=rf"layer 'tile': \(Tile\) {message}"):
        run_layers(layer_text("Tile", "tile", "data", "tile", "tile", **fields),
                   {"data": np.zeros((2, 3, 2, 2))})


# -- Silence -----------------------------------------------------------------------


@pytest.mark.layer_type("Silence")
def test_silence_consumes_its_bottoms():
    x = randn(2, 3, 2, 2)
    text = (layer_text("ReLU", "relu", "data", "a") + layer_text("Slice", "slice", "data",
                                                                 ["b", "c"], "slice", axis=1,
                                                                 slice_point=1)
            + layer_text("Silence", "silence", ["b", "c"], []))
    model = import_model(input_text({"data": x}) + text)
    assert model.caffe_outputs == ["a"]
    y = run_layers(text, {"data": x})
    assert list(y) == ["a"]
    np.testing.assert_array_equal(y["a"], np.maximum(x, 0))


@pytest.mark.layer_type("Silence")
def test_silence_has_no_tops():
    with pytest.raises(LayerError, match=r"layer 'silence': \(Silence\) has no tops"):
        run_layers(layer_text("Silence", "silence", "data", "x"), {"data": np.zeros((2, 3))})


# -- Concat ------------------------------------------------------------------------


CONCAT_CASES = {
    # name: (input shapes, fields, caffe axis)
    "channels": ([(2, 3, 4, 5), (2, 2, 4, 5)], {}, 1),
    "channels_three": ([(2, 3, 4, 5), (2, 2, 4, 5), (2, 1, 4, 5)], dict(axis=1), 1),
    "legacy_concat_dim": ([(2, 3, 4, 5), (2, 2, 4, 5)], dict(concat_dim=1), 1),
    "legacy_concat_dim_height": ([(2, 3, 4, 5), (2, 3, 1, 5)], dict(concat_dim=2), 2),
    "height": ([(2, 3, 4, 5), (2, 3, 2, 5)], dict(axis=2), 2),
    "width_negative": ([(2, 3, 4, 5), (2, 3, 4, 1)], dict(axis=-1), 3),
    "2d": ([(2, 3), (2, 5)], dict(axis=1), 1),
    "2d_negative": ([(2, 3), (2, 5), (2, 1)], dict(axis=-1), 1),
    "3d_last": ([(2, 3, 4), (2, 3, 2)], dict(axis=2), 2),
    "3d_channels": ([(2, 3, 4), (2, 1, 4)], dict(axis=1), 1),
}


@pytest.mark.layer_type("Concat")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", list(CONCAT_CASES))
def test_concat(case, data_format):
    shapes, fields, axis = CONCAT_CASES[case]
    inputs = {f"in{i}": randn(*s) for i, s in enumerate(shapes)}
    text = layer_text("Concat", "concat", list(inputs), "concat", "concat" if fields else None,
                      **fields)
    y = run_layers(text, inputs, data_format=data_format)["concat"]
    np.testing.assert_array_equal(y, np.concatenate(list(inputs.values()), axis=axis))


@pytest.mark.layer_type("Concat")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_concat_batch_axis_and_single_bottom(data_format):
    a, b = randn(2, 3, 2, 2), randn(1, 3, 2, 2)
    text = (layer_text("Concat", "batch", ["a", "b"], "batch", "concat", axis=0)
            + layer_text("Concat", "one", ["a"], "one"))
    y = run_layers(text, {"a": a, "b": b}, data_format=data_format)
    np.testing.assert_array_equal(y["batch"], np.concatenate([a, b], 0))
    np.testing.assert_array_equal(y["one"], a)


@pytest.mark.layer_type("Concat")
def test_concat_axis_and_concat_dim_together_is_an_error():
    with pytest.raises(LayerError, match="layer 'c': .*axis.*concat_dim"):
        run_layers(layer_text("Concat", "c", ["a", "b"], "c", "concat", axis=1, concat_dim=1),
                   {"a": np.zeros((2, 3)), "b": np.zeros((2, 3))})


@pytest.mark.layer_type("Concat")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_concat_mixed_layouts(data_format):
    """A flattened image ("flat" under channels_last) and a plain 2-D blob, either order."""
    a, c = randn(2, 3, 2, 2), randn(2, 5)
    text = (flatten_text("fa", "a") + layer_text("Concat", "ac", ["fa", "c"], "ac")
            + layer_text("Concat", "ca", ["c", "fa"], "ca"))
    y = run_layers(text, {"a": a, "c": c}, data_format=data_format)
    np.testing.assert_array_equal(y["ac"], np.concatenate([a.reshape(2, -1), c], 1))
    np.testing.assert_array_equal(y["ca"], np.concatenate([c, a.reshape(2, -1)], 1))


@pytest.mark.layer_type("Concat")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_concat_several_flat_blobs(data_format):
    """Several flattened images (each its own "flat" blob) with a plain 2-D blob."""
    a, b, c = randn(2, 3, 2, 2), randn(2, 2, 3, 1), randn(2, 5)
    text = (flatten_text("fa", "a") + flatten_text("fb", "b")
            + layer_text("Concat", "flats", ["fa", "fb"], "flats")
            + layer_text("Concat", "mixed", ["fa", "c", "fb"], "mixed"))
    y = run_layers(text, {"a": a, "b": b, "c": c}, data_format=data_format)
    np.testing.assert_array_equal(y["flats"], np.concatenate([a.reshape(2, -1),
                                                              b.reshape(2, -1)], 1))
    np.testing.assert_array_equal(y["mixed"], np.concatenate([a.reshape(2, -1), c,
                                                              b.reshape(2, -1)], 1))


@pytest.mark.layer_type("Concat")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_concat_then_inner_product(data_format):
    """Concatenated channels feed an InnerProduct with Caffe's C, H, W weight order."""
    a, b = randn(2, 3, 2, 2), randn(2, 1, 2, 2)
    w, bias = randn(4, 16), randn(4)
    text = layer_text("Concat", "concat", ["a", "b"], "concat") + ip_text("ip", "concat", 4)
    y = run_layers(text, {"a": a, "b": b}, {"ip": [w, bias]}, data_format)["ip"]
    expected = np.concatenate([a, b], 1).reshape(2, -1) @ w.T + bias
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


# -- Split -------------------------------------------------------------------------


@pytest.mark.layer_type("Split")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 7)])
def test_split(shape, data_format):
    x = randn(*shape)
    text = (layer_text("ReLU", "relu", "data", "r") + layer_text("Split", "split", "r",
                                                                 ["a", "b", "c"])
            + layer_text("Softmax", "sa", "a", "sa") + layer_text("ReLU", "rb", "b", "rb"))
    y = run_layers(text, {"data": x}, data_format=data_format)
    assert sorted(y) == ["c", "rb", "sa"]
    r = np.maximum(x, 0)
    np.testing.assert_array_equal(y["c"], r)
    np.testing.assert_array_equal(y["rb"], r)
    np.testing.assert_allclose(y["sa"], softmax_reference(r, 1), rtol=1e-5, atol=1e-6)


@pytest.mark.layer_type("Split")
def test_split_tops_are_the_bottom():
    x = randn(2, 3, 4, 5)
    text = layer_text("Split", "split", "data", ["a", "b"])
    _, blobs = build(text + layer_text("Concat", "concat", ["a", "b"], "c"), {"data": x},
                     "channels_last")
    assert blobs["a"] is blobs["data"] and blobs["b"] is blobs["data"]
    y = run_layers(text, {"data": x}, outputs=["a", "b"])
    np.testing.assert_array_equal(y["a"], x)
    np.testing.assert_array_equal(y["b"], x)


# -- Softmax -----------------------------------------------------------------------


def softmax_reference(x, axis):
    """Caffe's SoftmaxLayer: subtract the max over ``axis``, exp, divide by the sum."""
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


SOFTMAX_CASES = {
    "4d_channels": ((2, 5, 3, 4), {}, 1),
    "4d_channels_explicit": ((2, 5, 3, 4), dict(axis=1), 1),
    "4d_height": ((2, 5, 3, 4), dict(axis=2), 2),
    "4d_width_negative": ((2, 5, 3, 4), dict(axis=-1), 3),
    "2d": ((3, 10), {}, 1),
    "2d_negative": ((3, 10), dict(axis=-1), 1),
    "3d_last": ((2, 4, 6), dict(axis=2), 2),
}


@pytest.mark.layer_type("Softmax")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", list(SOFTMAX_CASES))
def test_softmax(case, data_format):
    shape, fields, axis = SOFTMAX_CASES[case]
    x = randn(*shape) * 3
    text = layer_text("Softmax", "prob", "data", "prob", "softmax" if fields else None, **fields)
    y = run_layers(text, {"data": x}, data_format=data_format)["prob"]
    np.testing.assert_allclose(y, softmax_reference(x, axis), rtol=1e-5, atol=1e-6)


@pytest.mark.layer_type("Softmax")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_softmax_on_flat_and_reshaped_blobs(data_format):
    """Softmax over a flattened image, and SSD's reshape to (N, boxes, classes) + axis 2."""
    x = randn(2, 6, 2, 3) * 3
    text = (flatten_text() + layer_text("Softmax", "prob_flat", "flat", "prob_flat")
            + reshape_text((0, -1, 3), "boxes", "data")
            + layer_text("Softmax", "prob_boxes", "boxes", "prob_boxes", "softmax", axis=2)
            + flatten_text("prob_boxes_flat", "prob_boxes"))
    y = run_layers(text, {"data": x}, data_format=data_format)
    np.testing.assert_allclose(y["prob_flat"], softmax_reference(x.reshape(2, -1), 1),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y["prob_boxes_flat"],
                               softmax_reference(x.reshape(2, -1, 3), 2).reshape(2, -1),
                               rtol=1e-5, atol=1e-6)


# -- Input -------------------------------------------------------------------------


def input_layer(tops, shapes):
    text = 'layer { name: "input" type: "Input" '
    text += "".join(f'top: "{t}" ' for t in tops) + "input_param { "
    text += "".join("shape { " + " ".join(f"dim: {d}" for d in s) + " } " for s in shapes)
    return text + "} }\n"


def keras_shape(caffe_shape, data_format):
    dims = (None, *caffe_shape[1:])
    if data_format == "channels_last" and len(dims) >= 3:
        return (None, *dims[2:], dims[1])
    return dims


@pytest.mark.layer_type("Input")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("shapes, tops", [
    ([(2, 3, 4, 5)], ["a"]),
    ([(2, 3, 4, 5)], ["a", "b"]),                    # one shape for every top
    ([(2, 3, 4, 5), (2, 1, 4, 5)], ["a", "b"]),      # one shape per top
    ([(2, 6)], ["a", "b", "c"]),
    ([(2, 3, 4, 5), (2, 7)], ["a", "b"]),            # image and vector
    ([(2, 3, 7)], ["a"]),
])
def test_input(shapes, tops, data_format):
    text = input_layer(tops, shapes)
    for t in tops:
        text += layer_text("ReLU", f"relu_{t}", t, f"relu_{t}")
    model = import_model(text, data_format=data_format)
    caffe_shapes = [shapes[min(i, len(shapes) - 1)] for i in range(len(tops))]
    assert [tuple(t.shape) for t in model.inputs] == [keras_shape(s, data_format)
                                                      for s in caffe_shapes]
    assert [t.name for t in model.inputs] == tops
    xs = [randn(*s) for s in caffe_shapes]
    feed = [to_keras_layout(x, data_format) for x in xs]
    y = model(feed if len(feed) > 1 else feed[0])
    y = y if isinstance(y, dict) else {f"relu_{tops[0]}": y}
    for t, x in zip(tops, xs):
        got = from_keras_layout(keras.ops.convert_to_numpy(y[f"relu_{t}"]), data_format)
        np.testing.assert_array_equal(got, np.maximum(x, 0))


@pytest.mark.layer_type("Input")
def test_input_batch_is_free():
    model = import_model(input_layer(["data"], [(1, 3, 2, 2)])
                         + layer_text("ReLU", "relu", "data", "out"))
    x = randn(5, 2, 2, 3)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(model(x)), np.maximum(x, 0))


@pytest.mark.layer_type("Input")
@pytest.mark.parametrize("tops, shapes, message", [
    (["a", "b", "c"], [(2, 3), (2, 4)], "2 shapes for 3 tops"),
    (["a"], [(2, 0, 3)], r"input shape \[2, 0, 3\] for top 'a' is not a valid shape"),
    (["a"], [(2, -1)], r"input shape \[2, -1\] for top 'a' is not a valid shape"),
    (["a"], [()], r"input shape \[\] for top 'a' is not a valid shape"),
])
def test_input_bad_shapes(tops, shapes, message):
    with pytest.raises(LayerError, match=f"layer 'input': {message}"):
        import_model(input_layer(tops, shapes) + layer_text("Concat", "c", tops, "c"))


# -- The Keras layers ----------------------------------------------------------------


def test_shape_layers_serialize():
    x = keras.Input((4, 5, 6))
    ref = keras.Input((2, 3, 6))
    a, b = shape_layers.Slice(3, [2])(x)
    c = shape_layers.Crop([1, 1, 2, 0], [None, 2, 3, 6])([x, ref])
    d = shape_layers.Tile(1, 2)(x)
    e = shape_layers.Slice(0, num_slices=2)(x)
    model = keras.Model([x, ref], [a, b, c, d, *e])
    clone = keras.Model.from_config(model.get_config())
    data = [randn(4, 4, 5, 6), randn(2, 2, 3, 6)]
    for got, want in zip(clone(data), model(data)):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(got),
                                      keras.ops.convert_to_numpy(want))
    got = [keras.ops.convert_to_numpy(t) for t in model(data)]
    np.testing.assert_array_equal(got[2], data[0][1:3, 1:3, 2:5])
    np.testing.assert_array_equal(got[3], np.concatenate([data[0]] * 2, 1))
    assert math.prod(got[4].shape) == math.prod(got[5].shape)


def test_shape_layers_check_their_arguments():
    with pytest.raises(ValueError, match="positive and increasing"):
        shape_layers.Slice(1, [2, 2])
    with pytest.raises(ValueError, match="positive num_slices"):
        shape_layers.Slice(1)
    with pytest.raises(ValueError, match="tiles must be positive"):
        shape_layers.Tile(1, 0)
    with pytest.raises(ValueError, match="2 offsets for 3 sizes"):
        shape_layers.Crop([0, 1], [None, 2, 3])
