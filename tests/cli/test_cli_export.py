"""``keras-caffe export`` and the files the CLI writes, through the installed
CLI run in this process (``cli_runner.run_cli``: what ``python -m
keras_caffe`` prints and its exit status, without a process's TensorFlow
import): round trips to Caffe's bytes, refusals, errors naming the user's
path (never a temporary file), output modes under a umask, and truncated
weights files located."""

import os
import stat
import tempfile
from pathlib import Path

import pytest

from support.cli_runner import run_cli
from keras_caffe.errors import WeightsError
from keras_caffe.importers.net.weights import load_weights
from keras_caffe.proto import caffe_pb2


@pytest.fixture()
def lenet(golden):
    return golden / "forward" / "lenet"


def cli(*args, cwd=None, umask=None):
    """``keras-caffe *args`` (in this process, on its devices: what these
    commands write does not depend on them)."""
    return run_cli(*args, cwd=cwd, umask=umask)


def error_line(proc):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("keras-caffe: error")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.fixture()
def lenet_keras(lenet, tmp_path):
    out = tmp_path / "lenet.keras"
    proc = cli("import", lenet / "deploy_used.prototxt", "--weights", lenet / "weights.caffemodel",
               "-o", out)
    assert proc.returncode == 0, proc.stderr
    return out


# -- round trips ---------------------------------------------------------------------

def test_import_then_export_gives_caffes_file_back_byte_for_byte(lenet, lenet_keras, tmp_path):
    out, net = tmp_path / "back.caffemodel", tmp_path / "back.prototxt"
    proc = cli("export", lenet_keras, "-o", out, "--prototxt", net)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"saved {out}", f"saved {net}"]
    assert out.read_bytes() == (lenet / "weights.caffemodel").read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["back.caffemodel", "back.prototxt", "lenet.keras"]
    # the prototxt is the imported net: importing it with the export gives Caffe's file again
    again = tmp_path / "again.keras"
    assert cli("import", net, "--weights", out, "-o", again).returncode == 0
    assert cli("export", again, "-o", tmp_path / "again.caffemodel").returncode == 0
    assert (tmp_path / "again.caffemodel").read_bytes() == out.read_bytes()


def test_export_to_hdf5_holds_the_same_blobs(lenet, lenet_keras, tmp_path):
    out = tmp_path / "back.caffemodel.h5"
    assert cli("export", lenet_keras, "-o", out).returncode == 0
    ours, caffe = load_weights(out), load_weights(lenet / "weights.caffemodel")
    assert list(ours) == list(caffe) == ["conv1", "conv2", "ip1", "ip2"]
    for name in caffe:
        assert [b.tobytes() for b in ours[name]] == [b.tobytes() for b in caffe[name]]


def test_a_keras_file_without_its_net_exports_the_weights(lenet, tmp_path):
    """A .keras written by plain model.save carries no net: the export holds
    name, type and blobs (what Caffe's CopyTrainedLayersFrom reads);
    --prototxt is refused."""
    import keras_caffe

    model = keras_caffe.import_model(lenet / "deploy_used.prototxt", lenet / "weights.caffemodel")
    model.save(tmp_path / "plain.keras")
    out = tmp_path / "w.caffemodel"
    assert cli("export", tmp_path / "plain.keras", "-o", out).returncode == 0
    net = caffe_pb2.NetParameter.FromString(out.read_bytes())
    assert [(layer.name, layer.type, len(layer.blobs)) for layer in net.layer] == [
        ("conv1", "Convolution", 2), ("conv2", "Convolution", 2), ("ip1", "InnerProduct", 2),
        ("ip2", "InnerProduct", 2)]
    caffe = load_weights(lenet / "weights.caffemodel")
    for name, blobs in load_weights(out).items():
        assert [b.tobytes() for b in blobs] == [b.tobytes() for b in caffe[name]]
    proc = cli("export", tmp_path / "plain.keras", "-o", tmp_path / "x.caffemodel",
               "--prototxt", tmp_path / "x.prototxt")
    assert error_line(proc) == (
        f"keras-caffe: error: {tmp_path / 'plain.keras'} does not carry its Caffe net (saved "
        "without it, e.g. by model.save or an older keras-caffe): --prototxt needs it")
    assert sorted(os.listdir(tmp_path)) == ["plain.keras", "w.caffemodel"]


# -- refusals ------------------------------------------------------------------------

def test_a_keras_model_not_made_by_keras_caffe_is_refused(tmp_path):
    import keras

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.save(tmp_path / "dense.keras")
    proc = cli("export", tmp_path / "dense.keras", "-o", tmp_path / "x.caffemodel")
    assert error_line(proc) == (
        f"keras-caffe: error: {tmp_path / 'dense.keras'}: not a model made by keras-caffe (no "
        "layer holds Caffe blobs): export needs one from `keras-caffe import -o` or "
        "keras_caffe.import_model")
    assert sorted(os.listdir(tmp_path)) == ["dense.keras"]


def test_missing_garbage_and_misnamed_files_are_refused(lenet_keras, tmp_path):
    garbage = tmp_path / "garbage.keras"
    garbage.write_bytes(b"not a zip")
    cases = {
        (tmp_path / "none.keras", "x.caffemodel"):  # found missing before TensorFlow loads
            f"{tmp_path / 'none.keras'}: No such file or directory",
        (garbage, "x.caffemodel"): f"{garbage}: not a .keras file (not a zip archive)",
        (lenet_keras, "x.bin"): "-o x.bin: the output must end in .caffemodel or .caffemodel.h5",
    }
    for (model, out), message in cases.items():
        assert error_line(cli("export", model, "-o", out, cwd=tmp_path)) == \
            f"keras-caffe: error: {message}"


# -- errors name the user's path ----------------------------------------------------------

def _read_only_directory(tmp_path):
    """A directory this process cannot create files in (root ignores modes:
    then sysfs, which refuses everyone)."""
    directory = tmp_path / "ro"
    directory.mkdir()
    directory.chmod(0o555)
    for candidate in (directory, Path("/sys")):
        try:
            fd, probe = tempfile.mkstemp(dir=candidate)
        except PermissionError:
            return candidate
        os.close(fd)
        os.unlink(probe)
    pytest.skip("no read-only directory available to this user")


def _write(suffix, out, lenet, lenet_keras, tmp_path):
    if suffix == ".keras":
        return cli("import", lenet / "deploy_used.prototxt", "-o", out)
    if suffix == ".prototxt":
        return cli("export", lenet_keras, "-o", tmp_path / "ok.caffemodel", "--prototxt", out)
    return cli("export", lenet_keras, "-o", out)


@pytest.mark.parametrize("suffix", [".keras", ".caffemodel", ".prototxt"])
def test_an_output_in_a_missing_directory_names_the_users_path(lenet, lenet_keras, tmp_path,
                                                                suffix):
    missing = tmp_path / "no" / "such" / f"net{suffix}"
    line = error_line(_write(suffix, missing, lenet, lenet_keras, tmp_path))
    assert line == f"keras-caffe: error: {missing}: No such file or directory"


@pytest.mark.parametrize("suffix", [".keras", ".caffemodel.h5"])
def test_an_output_in_a_read_only_directory_names_the_users_path(lenet, lenet_keras, tmp_path,
                                                                 suffix):
    read_only = _read_only_directory(tmp_path) / f"net{suffix}"
    line = error_line(_write(suffix, read_only, lenet, lenet_keras, tmp_path))
    assert line == f"keras-caffe: error: {read_only}: Permission denied"


# -- modes ---------------------------------------------------------------------------

def test_every_output_gets_the_mode_open_would_give(lenet, tmp_path):
    umask = 0o027
    keras_file = tmp_path / "lenet.keras"
    assert cli("import", lenet / "deploy_used.prototxt", "-o", keras_file,
               umask=umask).returncode == 0
    outputs = [keras_file, tmp_path / "w.caffemodel", tmp_path / "w.caffemodel.h5",
               tmp_path / "n.prototxt"]
    assert cli("export", keras_file, "-o", outputs[1], "--prototxt", outputs[3],
               umask=umask).returncode == 0
    assert cli("export", keras_file, "-o", outputs[2], umask=umask).returncode == 0
    for path in outputs:
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask, path


def test_snapshot_files_get_the_mode_open_would_give(tmp_path):
    import keras_caffe
    from keras_caffe.importers.snapshots.files import save_snapshot

    model = keras_caffe.import_model(
        'layer { name: "d" type: "Input" top: "d" input_param { shape { dim: 1 dim: 3 } } }\n'
        'layer { name: "ip" type: "InnerProduct" bottom: "d" top: "ip" '
        'inner_product_param { num_output: 2 } }', phase="TRAIN")
    optimizer = keras_caffe.SGD(0.1)
    optimizer.build(model.trainable_variables)
    old = os.umask(0o027)
    try:
        written = [save_snapshot(model, optimizer, tmp_path / fmt, 0, format=fmt)
                   for fmt in ("keras", "caffe", "caffe_hdf5")]
    finally:
        os.umask(old)
    for files in written:
        for path in (files.weights, files.solverstate):
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o640, path


# -- truncated weights -----------------------------------------------------------------

def _layer_spans(path):
    """``[(start, end)]`` of each top-level ``layer`` field, from the parsed
    file: the name field first, then each layer as tag (2 bytes for field
    100), length varint and its bytes."""
    net = caffe_pb2.NetParameter.FromString(path.read_bytes())
    pos = 2 + len(net.name)
    spans = []
    for layer in net.layer:
        size = layer.ByteSize()
        end = pos + 2 + len(_varint(size)) + size
        spans.append((pos, end))
        pos = end
    assert pos == path.stat().st_size
    return spans


def _varint(value):
    out = bytearray()
    while True:
        out.append((value & 0x7F) | (0x80 if value >> 7 else 0))
        value >>= 7
        if not value:
            return bytes(out)


def test_a_truncated_caffemodel_says_where_it_is_cut(lenet, tmp_path):
    source = lenet / "weights.caffemodel"
    data = source.read_bytes()
    spans = _layer_spans(source)
    truncated = tmp_path / "cut.caffemodel"
    for fraction in (0.001, 0.25, 0.5, 0.9, 0.999999):
        cut = int(len(data) * fraction)
        start, end = next(span for span in spans if span[0] < cut < span[1])
        truncated.write_bytes(data[:cut])
        with pytest.raises(WeightsError) as err:
            load_weights(truncated)
        assert str(err.value) == (
            f"{truncated}: truncated at byte {cut} of at least {end} (its field `layer` at byte "
            f"{start} runs to byte {end})")
    truncated.write_bytes(data[:1])
    with pytest.raises(WeightsError) as err:
        load_weights(truncated)
    assert str(err.value) == f"{truncated}: truncated at byte 1 of at least 2 (its field `name` " \
        "at byte 0 is cut)"
    # through the CLI: the one-line error
    truncated.write_bytes(data[:1000])
    proc = cli("import", lenet / "deploy_used.prototxt", "--weights", truncated)
    assert error_line(proc) == (
        f"keras-caffe: error: {truncated}: truncated at byte 1000 of at least {spans[1][1]} "
        f"(its field `layer` at byte {spans[1][0]} runs to byte {spans[1][1]})")


def test_a_truncated_solverstate_says_where_it_is_cut(golden, tmp_path):
    import keras_caffe
    from keras_caffe.importers import training_args
    from keras_caffe.importers.snapshots.files import SnapshotError, load_snapshot

    folder = golden / "solvers" / "sgd"
    data = (folder / "bin_run" / "snap_iter_30.solverstate").read_bytes()
    state = caffe_pb2.SolverState.FromString(data)
    head = 2 + len(state.learned_net) + 2  # iter (varint 30), learned_net
    first = state.history[0].ByteSize()
    truncated = tmp_path / "cut.solverstate"
    truncated.write_bytes(data[:head + 100])
    model = keras_caffe.import_model(folder / "train_net.prototxt", phase="TRAIN",
                                     input_shapes={"data": (20,), "label": ()})
    optimizer = keras_caffe.SGD(0.1)
    model.compile(optimizer=optimizer, **training_args(model))
    with pytest.raises(SnapshotError) as err:
        load_snapshot(truncated, model, optimizer)
    end = head + 1 + len(_varint(first)) + first
    assert str(err.value) == (f"{truncated}: truncated at byte {head + 100} of at least {end} "
                              f"(its field `history` at byte {head} runs to byte {end}): not a "
                              "whole solverstate")
