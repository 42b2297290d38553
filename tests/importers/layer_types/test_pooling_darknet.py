"""Pooling under ChenYingpeng/caffe-yolov3's output-size rule (the
``pooling_rule("caffe-yolov3")`` block), against a numpy port of that fork's
``caffe_layers/pooling_layer/pooling_layer.cpp`` (github.com/ChenYingpeng/
caffe-yolov3, commit 7bf540261908d03324077d42bdabdb61349c0538, "yolov4"; the
file was dropped again in 9407a24, its README at 7bf5402 quotes the patch):
BVLC's ``Reshape`` plus "added by chen for darknet yolov3 tiny maxpool layer
stride=1,size =2": ``if ((kernel_h_ - stride_h_) % 2 == 1) { pooled_height_
+= 1; pooled_width_ += 1; }`` before the pad clipping, and BVLC's
``Forward_cpu`` / ``Backward_cpu`` loops (MAX with its mask, AVE).

And the net it was written for: yolov3-tiny as that repository's
``prototxt/yolov3-tiny.prototxt`` (commit 8db9e388) has it at 416x416. The
repository has no license, so ``yolov3_tiny()`` rebuilds the file's layers
(names, types, parameters, wiring: darknet's yolov3-tiny.cfg through
darknet2caffe) rather than storing the file.
"""

import json
import math

import numpy as np
import pytest

from keras_caffe import layers
from keras_caffe.errors import ArgumentError, LayerError
from keras_caffe.importers import import_model
from keras_caffe.analysis import analyze
from keras_caffe.importers.layer_types.pooling import current_rule, pooling_rule
from support import DATA_FORMATS, run_layers
from support.layer_gradients import backward

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)

FLT_MAX = np.finfo(np.float32).max


class CheckFailed(Exception):
    """The fork's Reshape fails a CHECK (its Caffe aborts)."""


def cpp_remainder(a, b):
    """C++'s ``%`` on ints: truncated, the dividend's sign (-1 % 2 == -1)."""
    return int(math.fmod(a, b))


def fork_reshape(height, width, kernel, stride, pad):
    """The fork's PoolingLayer::Reshape: (pooled_height_, pooled_width_)."""
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, pad
    pooled_h = int(math.ceil(np.float32(height + 2 * ph - kh) / np.float32(sh))) + 1
    pooled_w = int(math.ceil(np.float32(width + 2 * pw - kw) / np.float32(sw))) + 1
    if cpp_remainder(kh - sh, 2) == 1:  # added by chen for darknet yolov3 tiny
        pooled_h += 1
        pooled_w += 1
    if ph or pw:
        if (pooled_h - 1) * sh >= height + ph:
            pooled_h -= 1
        if (pooled_w - 1) * sw >= width + pw:
            pooled_w -= 1
        if not ((pooled_h - 1) * sh < height + ph and (pooled_w - 1) * sw < width + pw):
            raise CheckFailed("CHECK_LT((pooled_height_ - 1) * stride_h_, height_ + pad_h_)")
    return pooled_h, pooled_w


def fork_windows(height, width, kernel, stride, pad, pool):
    """Per output (i, j): the window's clipped rows, columns and AVE's
    pool_size, as Forward_cpu / Backward_cpu compute them."""
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, pad
    oh, ow = fork_reshape(height, width, kernel, stride, pad)
    for i in range(oh):
        for j in range(ow):
            hstart, wstart = i * sh - ph, j * sw - pw
            if pool == "MAX":
                hend, wend, pool_size = min(hstart + kh, height), min(wstart + kw, width), None
            else:
                hend, wend = min(hstart + kh, height + ph), min(wstart + kw, width + pw)
                pool_size = (hend - hstart) * (wend - wstart)
                hend, wend = min(hend, height), min(wend, width)
            yield i, j, range(max(hstart, 0), hend), range(max(wstart, 0), wend), pool_size


def fork_forward(x, kernel, stride, pad, pool):
    """The fork's Forward_cpu: (top, mask) for MAX (first strict maximum of
    the row-major scan, from -FLT_MAX and -1), (top, None) for AVE."""
    n, c, height, width = x.shape
    oh, ow = fork_reshape(height, width, kernel, stride, pad)
    if pool == "MAX":
        top = np.full((n, c, oh, ow), -FLT_MAX, np.float32)
        mask = np.full((n, c, oh, ow), -1.0, np.float32)
    else:
        top, mask = np.zeros((n, c, oh, ow), np.float32), None
    for i, j, rows, cols, pool_size in fork_windows(height, width, kernel, stride, pad, pool):
        for h in rows:
            for w in cols:
                if pool == "MAX":
                    better = x[:, :, h, w] > top[:, :, i, j]
                    top[:, :, i, j] = np.where(better, x[:, :, h, w], top[:, :, i, j])
                    mask[:, :, i, j] = np.where(better, h * width + w, mask[:, :, i, j])
                else:
                    top[:, :, i, j] += x[:, :, h, w]
        if pool == "AVE":
            top[:, :, i, j] /= pool_size
    return top, mask


def fork_backward(x_shape, top_diff, mask, kernel, stride, pad, pool):
    """The fork's Backward_cpu: MAX adds each top_diff at its mask index (in
    output order), AVE spreads it over the window divided by pool_size."""
    n, c, height, width = x_shape
    bottom = np.zeros((n, c, height * width), np.float32)
    if pool == "MAX":
        flat_diff, flat_mask = top_diff.reshape(n, c, -1), mask.reshape(n, c, -1).astype(int)
        for b in range(n):
            for ch in range(c):
                for index in range(flat_diff.shape[2]):
                    bottom[b, ch, flat_mask[b, ch, index]] += flat_diff[b, ch, index]
        return bottom.reshape(x_shape)
    bottom = bottom.reshape(x_shape)
    for i, j, rows, cols, pool_size in fork_windows(height, width, kernel, stride, pad, pool):
        for h in rows:
            for w in cols:
                bottom[:, :, h, w] += top_diff[:, :, i, j] / pool_size
    return bottom


#: name: (pooling_param, kernel, stride, pad, pool, input (H, W), the fork's
#: top (H, W), BVLC's top (H, W)). Global pooling: kernel is the input's.
CASES = {
    # yolov3-tiny's layer12-maxpool: darknet keeps 13x13.
    "darknet_max_2_1": ("pool: MAX kernel_size: 2 stride: 1", (2, 2), (1, 1), (0, 0), "MAX",
                        (13, 13), (13, 13), (12, 12)),
    "darknet_ave_2_1": ("pool: AVE kernel_size: 2 stride: 1", (2, 2), (1, 1), (0, 0), "AVE",
                        (13, 10), (13, 10), (12, 9)),
    # AlexNet's pools get the extra row and column too.
    "max_3_2": ("pool: MAX kernel_size: 3 stride: 2", (3, 3), (2, 2), (0, 0), "MAX",
                (13, 11), (7, 6), (6, 5)),
    "ave_4_1_pad_1": ("pool: AVE kernel_size: 4 stride: 1 pad: 1", (4, 4), (1, 1), (1, 1),
                      "AVE", (7, 9), (7, 9), (6, 8)),
    # The pad clipping takes the extra row and column back.
    "max_3_2_pad_1": ("pool: MAX kernel_size: 3 stride: 2 pad: 1", (3, 3), (2, 2), (1, 1),
                      "MAX", (9, 11), (5, 6), (5, 6)),
    # kernel_h - stride_h decides for both axes.
    "kernel_h_2_w_3": ("pool: MAX kernel_h: 2 kernel_w: 3 stride: 1", (2, 3), (1, 1), (0, 0),
                       "MAX", (6, 7), (6, 6), (5, 5)),
    "kernel_h_3_w_2": ("pool: MAX kernel_h: 3 kernel_w: 2 stride: 1", (3, 2), (1, 1), (0, 0),
                       "MAX", (6, 7), (4, 6), (4, 6)),
    # C++'s -1 % 2 is -1: a stride past the kernel adds nothing.
    "stride_past_kernel": ("pool: MAX kernel_size: 1 stride: 2", (1, 1), (2, 2), (0, 0), "MAX",
                           (7, 7), (4, 4), (4, 4)),
    # A pad on H only: Caffe clips W's last window too (stride 3 > kernel 1),
    # under either rule.
    "pad_h_only": ("pool: MAX kernel_h: 3 kernel_w: 1 stride_h: 1 stride_w: 3 pad_h: 1 pad_w: 0",
                   (3, 1), (1, 3), (1, 0), "MAX", (5, 5), (5, 2), (5, 2)),
    # Global: kernel H x W at stride 1, so an even H gives 2 x 2.
    "global_ave_even_h": ("pool: AVE global_pooling: true", (6, 5), (1, 1), (0, 0), "AVE",
                          (6, 5), (2, 2), (1, 1)),
    "global_max_even_h": ("pool: MAX global_pooling: true", (4, 4), (1, 1), (0, 0), "MAX",
                          (4, 4), (2, 2), (1, 1)),
    "global_max_odd_h": ("pool: MAX global_pooling: true", (5, 6), (1, 1), (0, 0), "MAX",
                         (5, 6), (1, 1), (1, 1)),
}


def pool_net(params, tops):
    return ('layer { name: "pool" type: "Pooling" bottom: "data" '
            + "".join(f'top: "{t}" ' for t in tops) + f"pooling_param {{ {params} }} }}\n")


def case_input(case, seed=0):
    height, width = CASES[case][5]
    return np.random.default_rng(seed).standard_normal((2, 3, height, width)).astype(np.float32)


@pytest.mark.layer_type("Pooling")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", list(CASES))
def test_forward_matches_the_fork(case, data_format):
    """The tops (and MAX's mask) of the fork's Forward_cpu, at its sizes."""
    params, kernel, stride, pad, pool, _, fork_size, _ = CASES[case]
    x = case_input(case)
    tops = ("pool", "mask") if pool == "MAX" else ("pool",)
    with pooling_rule("caffe-yolov3"):
        out = run_layers(pool_net(params, tops), {"data": x}, data_format=data_format,
                         outputs=list(tops))
    top, mask = fork_forward(x, kernel, stride, pad, pool)
    assert top.shape[2:] == fork_size
    assert out["pool"].shape == top.shape
    if pool == "MAX":
        np.testing.assert_array_equal(out["pool"], top)
        np.testing.assert_array_equal(out["mask"], mask)
    else:
        np.testing.assert_allclose(out["pool"], top, rtol=1e-6, atol=1e-7)


@pytest.mark.layer_type("Pooling")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", ["darknet_max_2_1", "darknet_ave_2_1", "max_3_2",
                                  "ave_4_1_pad_1", "global_ave_even_h"])
def test_backward_matches_the_fork(case, data_format):
    """The input gradient of sum(top * dy) is the fork's Backward_cpu."""
    params, kernel, stride, pad, pool = CASES[case][:5]
    x = case_input(case, seed=1)
    with pooling_rule("caffe-yolov3"):
        model = import_model(f'input: "data" input_shape {{ dim: 2 dim: 3 dim: {x.shape[2]} '
                             f'dim: {x.shape[3]} }}\n' + pool_net(params, ("pool",)),
                             data_format=data_format)
    top, mask = fork_forward(x, kernel, stride, pad, pool)
    dy = np.random.default_rng(2).standard_normal(top.shape).astype(np.float32)
    grad, _ = backward(model, x, dy, data_format)
    np.testing.assert_allclose(grad, fork_backward(x.shape, dy, mask, kernel, stride, pad, pool),
                               rtol=1e-6, atol=1e-6)


@pytest.mark.layer_type("Pooling")
@pytest.mark.parametrize("case", list(CASES))
def test_bvlc_rule_outside_the_block(case):
    """Outside the block (and after it) the sizes are BVLC's again."""
    params, _, _, _, _, (height, width), _, bvlc_size = CASES[case]
    net = (f'input: "data" input_shape {{ dim: 1 dim: 2 dim: {height} dim: {width} }}\n'
           + pool_net(params, ("pool",)))
    with pooling_rule("caffe-yolov3"):
        assert current_rule() == "caffe-yolov3"
    assert current_rule() == "bvlc"
    assert analyze(net).layers[-1].tops == (("pool", (1, 2, *bvlc_size)),)
    assert import_model(net).output_shape == (None, *bvlc_size, 2)


@pytest.mark.layer_type("Pooling")
def test_analyze_sizes_under_the_rule():
    """analyze (and so LMS's prediction) reads the same rule: its tops and
    activation counts are the fork's sizes."""
    net = ('input: "data" input_shape { dim: 4 dim: 8 dim: 13 dim: 13 }\n'
           + pool_net("pool: MAX kernel_size: 2 stride: 1", ("pool",)))
    with pooling_rule("caffe-yolov3"):
        row = analyze(net, batch=None).layers[-1]
    assert row.tops == (("pool", (4, 8, 13, 13)),)
    assert row.activations == 4 * 8 * 13 * 13


@pytest.mark.layer_type("Pooling")
def test_the_rule_is_restored_after_an_error():
    """An exception inside the block leaves the default rule behind, and a
    nested block restores the outer one."""
    with pytest.raises(RuntimeError, match="^inside$"):
        with pooling_rule("caffe-yolov3"):
            with pooling_rule("bvlc"):
                assert current_rule() == "bvlc"
            assert current_rule() == "caffe-yolov3"
            raise RuntimeError("inside")
    assert current_rule() == "bvlc"


def test_unknown_rule_is_refused():
    with pytest.raises(ArgumentError) as info:
        with pooling_rule("darknet"):
            pass
    assert str(info.value) == ("pooling_rule: `rule` must be one of 'bvlc', 'caffe-yolov3', "
                               "got 'darknet'")
    assert current_rule() == "bvlc"


def one_pool_error(params, height, width):
    net = (f'input: "data" input_shape {{ dim: 1 dim: 1 dim: {height} dim: {width} }}\n'
           + pool_net(params, ("pool",)))
    with pooling_rule("caffe-yolov3"):
        with pytest.raises(LayerError) as from_analyze:
            analyze(net)
        with pytest.raises(LayerError) as from_import:
            import_model(net)
    assert str(from_analyze.value) == str(from_import.value)
    return str(from_import.value)


@pytest.mark.layer_type("Pooling")
def test_a_last_window_past_the_input_is_refused():
    """Without a pad the extra window can start past the input (4x4, kernel
    3, stride 2: the fork's third window starts at 4): it holds no cell, so
    the fork gives -FLT_MAX (mask -1, which its backward writes through) or
    AVE's 0/0. Refused before anything is built."""
    assert fork_reshape(4, 4, (3, 3), (2, 2), (0, 0)) == (3, 3)
    assert list(fork_windows(4, 4, (3, 3), (2, 2), (0, 0), "MAX"))[-1][2] == range(4, 4)
    assert one_pool_error("pool: MAX kernel_size: 3 stride: 2", 4, 4) == (
        "layer 'pool': (Pooling) under ChenYingpeng/caffe-yolov3's rule (kernel 3, stride 2, "
        "pad 0) the last of its 3 windows along H starts at 4, past the input's 4 (input "
        "shape (1, 1, 4, 4)): that window holds no input cell")


@pytest.mark.layer_type("Pooling")
def test_the_forks_failed_check_is_refused():
    """With a pad, where the fork's Reshape fails its CHECK_LT after the one
    decrement (4x4, kernel 3, stride 2, pad 2), the import refuses it."""
    with pytest.raises(CheckFailed):
        fork_reshape(4, 4, (3, 3), (2, 2), (2, 2))
    assert one_pool_error("pool: AVE kernel_size: 3 stride: 2 pad: 2", 4, 4) == (
        "layer 'pool': (Pooling) under ChenYingpeng/caffe-yolov3's rule (kernel 3, stride 2, "
        "pad 2) the last of its 4 windows along H starts at 4, past the input's 4 (input "
        "shape (1, 1, 4, 4)): its PoolingLayer::Reshape fails CHECK_LT there")


@pytest.mark.layer_type("Pooling")
def test_floor_rounding_is_not_in_the_fork():
    """The fork's pooling_layer.cpp predates round_mode: it always rounds up."""
    assert one_pool_error("pool: MAX kernel_size: 2 stride: 1 round_mode: FLOOR", 5, 5) == (
        "layer 'pool': (Pooling) round_mode: FLOOR is not in ChenYingpeng/caffe-yolov3's "
        "pooling_layer.cpp (the caffe-yolov3 rule): it always rounds up")


def test_keras_layer_rule_and_config():
    """The Keras layer keeps its rule through get_config (BVLC's configs
    stay as they were) and refuses rules it does not know."""
    pool = layers.Pooling("MAX", kernel_size=2, stride=1, rule="caffe-yolov3")
    assert pool.compute_output_shape((None, 13, 13, 8)) == (None, 13, 13, 8)
    config = pool.get_config()
    assert config["rule"] == "caffe-yolov3"
    assert layers.Pooling.from_config(config).compute_output_shape((None, 13, 13, 8)) == (
        None, 13, 13, 8)
    assert "rule" not in layers.Pooling("MAX", kernel_size=2, stride=1).get_config()
    with pytest.raises(ValueError, match="^rule must be one of 'bvlc', 'caffe-yolov3', got "
                                         "'darknet'$"):
        layers.Pooling("MAX", kernel_size=2, rule="darknet")
    with pytest.raises(ValueError, match="^the caffe-yolov3 rule has ceil mode only$"):
        layers.Pooling("MAX", kernel_size=2, ceil_mode=False, rule="caffe-yolov3")


# -- yolov3-tiny ----------------------------------------------------------------


def yolov3_tiny():
    """ChenYingpeng/caffe-yolov3's prototxt/yolov3-tiny.prototxt (commit
    8db9e388) layer by layer: conv N is Convolution + BatchNorm + Scale +
    leaky ReLU (0.1), in place, except the two heads (16, 23: bias, linear);
    maxpools 2x2 at stride 2, layer12's at stride 1; route 18 takes layer14,
    route 21 the 2x upsampled layer19 and layer9."""
    text = ['name: "Darkent2Caffe"\ninput: "data"\n'
            'input_dim: 1\ninput_dim: 3\ninput_dim: 416\ninput_dim: 416\n']

    def add(name, kind, bottoms, top, params=""):
        text.append(f'layer {{ name: "{name}" type: "{kind}" '
                    + "".join(f'bottom: "{b}" ' for b in bottoms) + f'top: "{top}" {params} }}\n')

    def conv(i, bottom, filters, size, head=False):
        top = f"layer{i}-conv"
        add(top, "Convolution", [bottom], top,
            f"convolution_param {{ num_output: {filters} kernel_size: {size} pad: {size // 2} "
            f"stride: 1 bias_term: {'true' if head else 'false'} }}")
        if not head:
            add(f"layer{i}-bn", "BatchNorm", [top], top,
                "batch_norm_param { use_global_stats: true }")
            add(f"layer{i}-scale", "Scale", [top], top, "scale_param { bias_term: true }")
            add(f"layer{i}-act", "ReLU", [top], top, "relu_param { negative_slope: 0.1 }")
        return top

    def maxpool(i, bottom, stride):
        top = f"layer{i}-maxpool"
        add(top, "Pooling", [bottom], top,
            f"pooling_param {{ stride: {stride} pool: MAX kernel_size: 2 pad: 0 }}")
        return top

    blob = "data"
    for i, filters in zip(range(1, 12, 2), (16, 32, 64, 128, 256, 512)):
        blob = conv(i, blob, filters, 3)
        blob = maxpool(i + 1, blob, 1 if i == 11 else 2)
    blob = conv(13, blob, 1024, 3)
    conv(16, conv(15, conv(14, blob, 256, 1), 512, 3), 255, 1, head=True)
    add("layer18-route", "Concat", ["layer14-conv"], "layer18-route")
    conv(19, "layer18-route", 128, 1)
    add("layer20-upsample", "Upsample", ["layer19-conv"], "layer20-upsample",
        "upsample_param { scale: 2 }")
    add("layer21-route", "Concat", ["layer20-upsample", "layer9-conv"], "layer21-route")
    conv(23, conv(22, "layer21-route", 256, 3), 255, 1, head=True)
    return "".join(text)


YOLOV3_TINY_ERROR = (
    "layer 'layer21-route': (Concat) bottoms (1, 128, 24, 24), (1, 256, 26, 26) differ outside "
    "axis 1; layer 'layer12-maxpool' (Pooling, kernel 2x2, stride 1x1) pools 13x13 to 12x12 by "
    "BVLC Caffe's rule; ChenYingpeng/caffe-yolov3's Caffe (the pooling_layer.cpp darknet2caffe "
    "patches in) keeps 13x13, as darknet's maxpool does. A net from darknet2caffe needs that "
    "rule: import it inside `with keras_caffe.importers.pooling_rule(\"caffe-yolov3\"):`")


@pytest.mark.layer_type("Pooling")
def test_yolov3_tiny_needs_the_forks_rule():
    """BVLC's rule gives layer12-maxpool 12x12 and the route that joins the
    upsampled branch with layer9 fails, as in BVLC Caffe; the error names the
    pool, the fork, and how to ask for its rule. analyze says the same."""
    with pytest.raises(LayerError) as from_import:
        import_model(yolov3_tiny())
    assert str(from_import.value) == YOLOV3_TINY_ERROR
    with pytest.raises(LayerError) as from_analyze:
        analyze(yolov3_tiny())
    assert str(from_analyze.value) == YOLOV3_TINY_ERROR


@pytest.mark.layer_type("Pooling")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_yolov3_tiny_imports_under_the_forks_rule(data_format):
    """At 416x416 under the fork's rule: layer12-maxpool keeps 13x13, the
    heads are 13x13 (layer16-conv) and 26x26 (layer23-conv), 255 channels."""
    with pooling_rule("caffe-yolov3"):
        model = import_model(yolov3_tiny(), data_format=data_format)
        stats = {row.name: row for row in analyze(yolov3_tiny()).layers}
    shapes = {name: tuple(tensor.shape) for name, tensor in model.output.items()}
    if data_format == "channels_last":
        assert shapes == {"layer16-conv": (None, 13, 13, 255), "layer23-conv": (None, 26, 26, 255)}
    else:
        assert shapes == {"layer16-conv": (None, 255, 13, 13), "layer23-conv": (None, 255, 26, 26)}
    assert stats["layer12-maxpool"].tops == (("layer12-maxpool", (1, 512, 13, 13)),)
    assert stats["layer10-maxpool"].tops == (("layer10-maxpool", (1, 256, 13, 13)),)
    assert stats["layer21-route"].tops == (("layer21-route", (1, 384, 26, 26)),)
    assert stats["layer16-conv"].tops == (("layer16-conv", (1, 255, 13, 13)),)
    assert stats["layer23-conv"].tops == (("layer23-conv", (1, 255, 26, 26)),)
    assert model.count_params() == sum(row.weights for row in stats.values())
    assert model.get_layer("layer12-maxpool").rule == "caffe-yolov3"


@pytest.mark.layer_type("Pooling")
def test_no_note_where_the_fork_would_not_keep_the_size():
    """Only a pool that the fork keeps at its input's size (darknet's
    maxpool) adds the note: a kernel 3 stride 2 pool, which the fork also
    sizes differently, leaves a later error as it was."""
    net = ('input: "data" input_shape { dim: 1 dim: 3 dim: 8 dim: 8 }\n'
           + pool_net("pool: MAX kernel_size: 3 stride: 2", ("pool",))
           + 'layer { name: "cat" type: "Concat" bottom: "pool" bottom: "data" top: "cat" }\n')
    with pytest.raises(LayerError) as info:
        import_model(net)
    assert str(info.value) == ("layer 'cat': (Concat) bottoms (1, 3, 4, 4), (1, 3, 8, 8) differ "
                               "outside axis 1")


@pytest.mark.layer_type("Pooling")
def test_the_command_line_asks_for_the_rule_with_a_flag(tmp_path):
    """``keras-caffe import`` says --pooling-rule where the API says
    ``pooling_rule``; with the flag, yolov3-tiny imports (both heads)."""
    from support.cli_runner import run_cli

    from keras_caffe.cli._registry import POOLING_RULES
    from keras_caffe.layers.pooling import RULES

    assert tuple(POOLING_RULES) == tuple(RULES)
    net = tmp_path / "yolov3-tiny.prototxt"
    net.write_text(yolov3_tiny())
    failed = run_cli("import", net, "--summary")
    assert failed.returncode == 2
    assert failed.stderr.splitlines() == ["keras-caffe: error: " + YOLOV3_TINY_ERROR.replace(
        'import it inside `with keras_caffe.importers.pooling_rule("caffe-yolov3"):`',
        "give --pooling-rule caffe-yolov3")]
    done = run_cli("import", net, "--summary", "--json", "--pooling-rule", "caffe-yolov3")
    assert done.returncode == 0, done.stderr
    shapes = {row["name"]: row["shapes"] for row in json.loads(done.stdout)["layers"]}
    assert shapes["layer16-conv"] == [[None, 255, 13, 13]]
    assert shapes["layer23-conv"] == [[None, 255, 26, 26]]
