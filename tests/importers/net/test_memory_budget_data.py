"""The memory budget of the data layers (``importers/net/memory_budget.py``:
``check_pipeline``): a batch that the host memory cannot hold while its
``tf.data`` pipeline makes it is refused with a ``LayerError`` naming the
layer, its tops' shapes and the bytes, by ``import_model``, ``Solver``,
``keras-caffe train`` / ``time``, ``net_pipeline`` and ``layer_pipeline``,
before anything is filled or read (issue 33: a DummyData batch of 10^9 ended
in TensorFlow's ``ResourceExhaustedError`` from the input iterator after
30-42 s). The per-sample limit of ``input_shapes`` is checked as the argument
is read.

The refusals run in this process under an ``RLIMIT_DATA`` of 8 GiB
(``host_limit``), which the budget reads (the smallest of RAM, the cgroup
limit and the rlimits; the messages' numbers are computed from what it
reads). Under it, a pipeline that did allocate what it is asked for would
fail in TensorFlow instead of the expected error, so the tests also show
that nothing was allocated first.
"""

import contextlib
import resource

import numpy as np
import pytest
import tensorflow as tf

import keras_caffe
from support.cli_runner import run_cli
from keras_caffe.errors import ArgumentError, LayerError
from keras_caffe.importers import layer_pipeline, net_pipeline, parse_text
from keras_caffe.importers.data.pipeline_core import Context, DataPipeline
from keras_caffe.devices import device_memory, host_memory
from keras_caffe.devices import fmt_bytes
from keras_caffe.proto import caffe_pb2
from support.pipeline_fixtures import raw_lmdb

LIMIT = 8 * 2 ** 30


#: What the block must leave this process to allocate under the limit (the
#: import's own objects): a pytest-xdist worker holds GiBs from earlier files.
HEADROOM = 2 * 2 ** 30


@contextlib.contextmanager
def host_limit(nbytes=LIMIT):
    """This process's data segment limited to ``nbytes`` (the soft
    ``RLIMIT_DATA``; the hard limit and what is allocated already are
    untouched) for the block; yields ``host_memory()`` under it."""
    with open("/proc/self/status") as f:
        used = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmData:"))
    assert used < nbytes - HEADROOM, f"this process already has {fmt_bytes(used)} of data"
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    resource.setrlimit(resource.RLIMIT_DATA, (nbytes, hard))
    try:
        yield host_memory()
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))


def of(budget):
    """How the messages name a budget: '8.00 GiB of RLIMIT_DATA'."""
    limit, where = budget
    return f"{fmt_bytes(limit)} of {where}"


def refusal(layer, kind, tops, batch, need, budget):
    """The pipeline's refusal as ``check_pipeline`` words it."""
    return (f"layer {layer!r}: ({kind}) a batch of its tops ({tops}) is {batch}; its pipeline "
            f"needs {need} at once (3 batches' worth while it makes one, and the one the net "
            f"reads), more than the {of(budget)}: refusing to allocate")


def dummy_fields(*dims, filler=""):
    """A DummyData layer's fields: top 'd' of shape ``dims``."""
    shape = " ".join(f"dim: {d}" for d in dims)
    return f'name: "dummy" type: "DummyData" top: "d" dummy_data_param {{ shape {{ {shape} }} ' \
        f"{filler} }}"


def dummy(*dims, filler=""):
    return f"layer {{ {dummy_fields(*dims, filler=filler)} }}\n"


def inner_product(bottom="d"):
    return (f'layer {{ name: "ip" type: "InnerProduct" bottom: "{bottom}" top: "ip" '
            "inner_product_param { num_output: 2 } }\n")


#: The issue's reproducers: 10^9 values a batch, as the batch or one sample.
HOSTILE_DUMMY = {
    "batch_1e9": ((1000000000, 1), "'d' (1000000000, 1)"),
    "shape_1x1e9": ((1, 1000000000), "'d' (1, 1000000000)"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_DUMMY))
def test_import_model_refuses_a_dummydata_batch_of_1e9(case):
    """import_model: the DummyData layer, its top's shape and the 14.90 GiB
    its pipeline would need (4 x 3.73 GiB), before any Keras layer exists."""
    dims, tops = HOSTILE_DUMMY[case]
    with host_limit() as budget, pytest.raises(LayerError) as err:
        keras_caffe.import_model(dummy(*dims) + inner_product())
    assert str(err.value) == refusal("dummy", "DummyData", tops, "3.73 GiB", "14.90 GiB", budget)
    assert err.value.layer == "dummy"


def _train_files(tmp_path, dims):
    net = tmp_path / "net.prototxt"
    net.write_text(dummy(*dims) + inner_product() + 'layer { name: "loss" type: "EuclideanLoss" '
                   'bottom: "ip" bottom: "ip" top: "loss" }\n')
    solver = tmp_path / "solver.prototxt"
    solver.write_text(f'net: "{net}"\nbase_lr: 0.01\nlr_policy: "fixed"\nmax_iter: 1\n'
                      "display: 1\nsnapshot_after_train: false\nsolver_mode: CPU\n")
    return net, solver


@pytest.mark.parametrize("case", sorted(HOSTILE_DUMMY))
def test_solver_refuses_a_dummydata_batch_of_1e9(tmp_path, case):
    """keras_caffe.Solver: the same refusal, as it imports the train net."""
    dims, tops = HOSTILE_DUMMY[case]
    _, solver = _train_files(tmp_path, dims)
    with host_limit() as budget, pytest.raises(LayerError) as err:
        keras_caffe.Solver(str(solver), log=None).solve()
    assert str(err.value) == refusal("dummy", "DummyData", tops, "3.73 GiB", "14.90 GiB", budget)


@pytest.mark.parametrize("command", ["train", "time"])
@pytest.mark.parametrize("case", sorted(HOSTILE_DUMMY))
def test_cli_refuses_a_dummydata_batch_of_1e9(tmp_path, case, command):
    """keras-caffe train --solver / time --model: exit status 2 and the
    refusal on stderr, nothing on stdout."""
    dims, tops = HOSTILE_DUMMY[case]
    net, solver = _train_files(tmp_path, dims)
    args = ("train", "--solver", str(solver)) if command == "train" else \
        ("time", "--model", str(net), "--iterations", "1")
    with host_limit() as budget:
        result = run_cli(*args, cwd=tmp_path)
    expected = refusal("dummy", "DummyData", tops, "3.73 GiB", "14.90 GiB", budget)
    assert (result.returncode, result.stdout, result.stderr) == (
        2, "", f"keras-caffe: error: {expected}\n")


def test_a_filler_of_a_huge_blob_is_refused_before_it_fills():
    """A sparse gaussian DummyData blob of 6 x 10^8 values (2.24 GiB; its
    filler holds 3 such tensors at once) through layer_pipeline and
    net_pipeline: refused before one value is drawn."""
    fields = dummy_fields(2, 3, 10000, 10000,
                          filler='data_filler { type: "gaussian" std: 1 sparse: 2 }')
    layer, text = parse_text(fields, caffe_pb2.LayerParameter), f"layer {{ {fields} }}\n"
    with host_limit() as budget:
        expected = refusal("dummy", "DummyData", "'d' (2, 3, 10000, 10000)", "2.24 GiB",
                           "8.94 GiB", budget)
        for build in (lambda: layer_pipeline(layer), lambda: net_pipeline(text + inner_product())):
            with pytest.raises(LayerError) as err:
                build()
            assert str(err.value) == expected


def test_data_layers_read_together_are_refused_together():
    """Two DummyData layers of 1.12 GiB batches, each of whose pipelines would
    fit 8 GiB alone (4.47 GiB): net_pipeline reads them together, 8.94 GiB,
    and names both."""
    second = dummy(300000000, 1).replace('"dummy"', '"dummy2"').replace('top: "d"', 'top: "e"')
    with host_limit() as budget, pytest.raises(LayerError) as err:
        net_pipeline(dummy(300000000, 1) + second)
    assert str(err.value) == (
        "layer 'dummy': (DummyData) with data layer(s) 'dummy2', read together: a batch of "
        "their tops ('d' (300000000, 1), 'e' (300000000, 1)) is 2.24 GiB; their pipeline needs "
        "8.94 GiB at once (3 batches' worth while it makes one, and the one the net reads), "
        f"more than the {of(budget)}: refusing to allocate")


def _hostile_layers(tmp_path):
    """{kind: (net text, its refusal without the budget: layer, type, tops,
    batch, need)}: data layers whose batch fits the 8 GiB limit once (the
    per-layer check) but not while a pipeline makes it."""
    db, _, _ = raw_lmdb(tmp_path / "db", count=3, shape=(1, 2, 2))
    h5 = tmp_path / "rows.h5"
    import h5py

    with h5py.File(h5, "w") as f:
        f.create_dataset("x", data=np.zeros((3, 5, 5), np.float32))
    (tmp_path / "rows.txt").write_text(f"{h5}\n")
    return {
        "MemoryData": ('layer { name: "m" type: "MemoryData" top: "d" top: "label" '
                       "memory_data_param { batch_size: 500000000 channels: 1 height: 1 "
                       "width: 1 } }\n",
                       ("m", "MemoryData", "'d' (500000000, 1, 1, 1), 'label' (500000000,)",
                        "3.73 GiB", "14.90 GiB")),
        "Data": (f'layer {{ name: "db" type: "Data" top: "d" top: "label" data_param {{ '
                 f'source: "{db}" backend: LMDB batch_size: 250000000 }} }}\n',
                 ("db", "Data", "'d' (250000000, 1, 2, 2), 'label' (250000000,)", "4.66 GiB",
                  "18.63 GiB")),
        "Data_crop": (f'layer {{ name: "db" type: "Data" top: "d" transform_param {{ '
                      f'crop_size: 1 }} data_param {{ source: "{db}" backend: LMDB '
                      "batch_size: 1000000000 } }\n",
                      ("db", "Data", "'d' (1000000000, 1, 1, 1)", "3.73 GiB", "14.90 GiB")),
        "HDF5Data": (f'layer {{ name: "h5" type: "HDF5Data" top: "x" hdf5_data_param {{ '
                     f'source: "{tmp_path / "rows.txt"}" batch_size: 40000000 }} }}\n',
                     ("h5", "HDF5Data", "'x' (40000000, 5, 5)", "3.73 GiB", "14.90 GiB")),
        "ImageData": ('layer { name: "images" type: "ImageData" top: "d" top: "label" '
                      'image_data_param { source: "absent.txt" batch_size: 2 new_height: 10000 '
                      "new_width: 10000 } }\n",
                      ("images", "ImageData", "'d' (2, 3, 10000, 10000), 'label' (2,)",
                       "2.24 GiB", "8.94 GiB")),
    }


@pytest.mark.parametrize("kind", ["MemoryData", "Data", "Data_crop", "HDF5Data", "ImageData"])
def test_import_model_refuses_each_data_layer_kind(tmp_path, kind):
    """MemoryData's, Data's (cropped too), HDF5Data's and ImageData's
    batch_size and new_height/new_width: the same refusal by import_model, the
    source read for its first record at most."""
    text, (name, kind_name, tops, batch, need) = _hostile_layers(tmp_path)[kind]
    bottom = "x" if kind == "HDF5Data" else "d"
    with host_limit() as budget, pytest.raises(LayerError) as err:
        keras_caffe.import_model(text + inner_product(bottom), phase="TRAIN")
    assert str(err.value) == refusal(name, kind_name, tops, batch, need, budget)


#: Layers that resize their records as their pipeline starts: (fields,
#: refusal without the budget: layer, type, tops, batch, need).
RESIZING = {
    "ImageData": ('name: "images" type: "ImageData" top: "d" transform_param { crop_size: 4 } '
                  'image_data_param { source: "absent.txt" batch_size: 2 new_height: 60000 '
                  "new_width: 60000 }",
                  ("images", "ImageData", "'d resized' (2, 3, 60000, 60000)", "80.47 GiB",
                   "321.87 GiB")),
    "DenseImageData": ('name: "dense" type: "DenseImageData" top: "d" top: "label" '
                       'dense_image_data_param { source: "absent.txt" batch_size: 2 '
                       "new_height: 60000 new_width: 60000 crop_height: 4 crop_width: 4 }",
                       ("dense", "DenseImageData", "'d resized' (2, 3, 60000, 60000), "
                        "'label resized' (2, 1, 60000, 60000)", "107.29 GiB", "429.15 GiB")),
    "VideoData": ('name: "clips" type: "VideoData" top: "d" top: "label" transform_param { '
                  'crop_size: 4 } video_data_param { source: "absent.txt" use_image: true '
                  "batch_size: 2 new_length: 16 new_height: 60000 new_width: 60000 }",
                  ("clips", "VideoData", "'d resized' (2, 3, 16, 60000, 60000)", "1.26 TiB",
                   "5.03 TiB")),
}


@pytest.mark.parametrize("kind", sorted(RESIZING))
def test_a_resize_is_refused_before_the_first_image_is_read(kind):
    """ImageData, DenseImageData and VideoData resize the first record to
    new_height x new_width as their pipeline starts: refused before the list
    is read (here it does not exist), even where the crop would make the
    batch small."""
    fields, (name, kind_name, tops, batch, need) = RESIZING[kind]
    with host_limit() as budget, pytest.raises(LayerError) as err:
        layer_pipeline(parse_text(fields, caffe_pb2.LayerParameter))
    assert str(err.value) == refusal(name, kind_name, tops, batch, need, budget)


def test_a_huge_input_shape_is_refused():
    """Input layers (and a deploy net's input_dim / input_shape fields, which
    become one) of 3 x 10^10 values: refused by the per-layer budget, naming
    the layer; an Input's pipeline (the caller's arrays) by net_pipeline."""
    nets = [
        ("data", 'layer { name: "data" type: "Input" top: "d" input_param { shape { dim: 1 '
                 "dim: 3 dim: 100000 dim: 100000 } } }\n"),
        ("input", 'input: "d" input_dim: 1 input_dim: 3 input_dim: 100000 input_dim: 100000\n'),
        ("input", 'input: "d" input_shape { dim: 1 dim: 3 dim: 100000 dim: 100000 }\n'),
    ]
    with host_limit():
        device = of(device_memory())
        for name, text in nets:
            with pytest.raises(LayerError) as err:
                keras_caffe.import_model(text + inner_product())
            assert str(err.value) == (
                f"layer {name!r}: (Input) needs 111.76 GiB at once (inputs and outputs "
                f"for the batch, and weights), more than the {device}; no LMS plan can split "
                "one layer: refusing to allocate")


def test_an_input_batch_the_caller_feeds_imports_but_its_pipeline_is_refused():
    """A deploy net's Input declares a batch of 10^9: the model takes any
    batch, so it imports; a pipeline feeding the caller's arrays at that
    batch is refused."""
    text = ('layer { name: "data" type: "Input" top: "d" input_param { shape { '
            'dim: 1000000000 dim: 1 } } }\nlayer { name: "relu" type: "ReLU" bottom: "d" '
            'top: "r" }\n')
    with host_limit() as budget:
        model = keras_caffe.import_model(text)
        assert tuple(model.input.shape) == (None, 1)
        with pytest.raises(LayerError) as err:
            net_pipeline(text, arrays={"d": np.zeros((4, 1), np.float32)})
    assert str(err.value) == refusal("data", "Input", "'d' (1000000000, 1)", "3.73 GiB",
                                     "14.90 GiB", budget)


def test_input_shapes_is_refused_over_the_per_blob_limit():
    """import_model(input_shapes={"data": (3, 100000, 100000)}): an
    ArgumentError naming the entry and its values, before the net is read."""
    text = ('layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 '
            "dim: 3 dim: 8 dim: 8 } } }\n" + inner_product("data"))
    with pytest.raises(ArgumentError) as err:
        keras_caffe.import_model(text, input_shapes={"data": (3, 100000, 100000)})
    assert str(err.value) == (
        "import_model: `input_shapes` entry 'data': (3, 100000, 100000) is 30,000,000,000 "
        "values per sample, more than the 1,073,741,824 one blob may have; refusing to "
        "allocate")
    model = keras_caffe.import_model(text, input_shapes={"data": (3, 16, 16)})
    assert tuple(model.input.shape) == (None, 16, 16, 3)


def _counting_pipeline(limit):
    """A DataPipeline of (2, 3) batches under a host budget of ``limit``
    bytes whose load records each batch index it makes."""
    made = []

    def record(g):
        made.append(int(g))
        return np.full((2, 3), g, np.float32)

    def load(g):
        return {"x": tf.ensure_shape(tf.numpy_function(record, [g], tf.float32), (2, 3))}

    context = Context("TRAIN", None, "channels_last", 1, None, 0, 1, 0,
                      host=(limit, "a test's budget"))
    return DataPipeline(layers=["x"], tops=["x"], batch_size=2, num_records=2,
                        shapes={"x": (2, 3)}, load=load, context=context), made


def test_a_batch_too_big_to_read_ahead_is_made_when_asked_for():
    """24-byte batches under a 100-byte budget: more than AUTOTUNE's worst
    case fits (a load at its peak per core, buffers within half the budget),
    so each batch is made when the net asks for it and none ahead: after 3
    batches, exactly batches 0, 1, 2 were made, with tf.data's own
    parallelization and injected prefetch off."""
    pipe, made = _counting_pipeline(100)
    assert pipe.reads_ahead is False
    ds = pipe.dataset()
    optimization = ds.options().experimental_optimization
    assert (optimization.map_parallelization, optimization.inject_prefetch) == (False, False)
    batches = [int(b["x"][0, 0]) for _, b in zip(range(3), ds)]
    assert batches == [0, 1, 2] and made == [0, 1, 2]


def test_an_ordinary_batch_reads_ahead_within_the_ram_budget():
    """Under a 1 GiB budget a 24-byte batch keeps AUTOTUNE, its buffers within
    half the budget; a LeNet-sized DummyData under the machine's budget too."""
    pipe, _ = _counting_pipeline(2 ** 30)
    assert pipe.reads_ahead is True
    assert pipe.dataset().options().autotune.ram_budget == 2 ** 29
    lenet = net_pipeline(dummy(64, 1, 28, 28) + inner_product())
    assert lenet.reads_ahead is True
