"""keras-caffe's caffe.proto: BVLC's wire format, committed gencode, file I/O."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

from keras_caffe.errors import ProtoParseError
from keras_caffe.importers import read_binary, read_text
from keras_caffe.proto import caffe_pb2

PROTO = Path(caffe_pb2.__file__).with_name("caffe.proto")


def embedded_descriptor(source):
    """The FileDescriptorProto a generated _pb2.py registers.

    Compared as messages: protoc versions serialize the same schema to
    different bytes.
    """
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "AddSerializedFile":
            return descriptor_pb2.FileDescriptorProto.FromString(node.args[0].value)
    raise AssertionError("no AddSerializedFile call in the generated module")


def test_regenerating_changes_nothing(tmp_path):
    """protoc on the shipped caffe.proto gives the schema the gencode holds."""
    src = tmp_path / "src" / "keras_caffe" / "proto"
    src.mkdir(parents=True)
    (src / "caffe.proto").write_bytes(PROTO.read_bytes())
    out = tmp_path / "out"
    out.mkdir()
    # In a subprocess: grpc_tools' protoc crashes inside a process that has
    # loaded TensorFlow's protobuf libraries.
    proc = subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{tmp_path / 'src'}",
         f"--python_out={out}",
         "keras_caffe/proto/caffe.proto"],
        capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stderr
    generated = (out / "keras_caffe" / "proto" / "caffe_pb2.py").read_text()
    committed = Path(caffe_pb2.__file__).read_text()
    assert embedded_descriptor(generated) == embedded_descriptor(committed)


def test_committed_gencode_loads_on_protobuf_4_to_7():
    """TF 2.16-2.18 pin protobuf < 5 or < 6, TF 2.21 needs >= 6.31: the
    committed module must carry no runtime version check, which protoc >= 26
    adds. `make proto` regenerates it with protoc 25 (grpcio-tools 1.62.3)."""
    committed = Path(caffe_pb2.__file__).read_text()
    assert "# Protobuf Python Version: 4.25." in committed
    assert "runtime_version" not in committed


def test_schema_is_bvlcs():
    names = [m.name for m in caffe_pb2.DESCRIPTOR.message_types_by_name.values()]
    # BVLC's 63; the forks' parameters: SSD/SegNet/PSPNet/ShuffleNet/Faster
    # R-CNN 12, C3D 4 (Convolution3DParameter, Pooling3DParameter,
    # C3DBlobProto, VideoDataParameter), YOLO ports 4, recurrent forks 1, FlowNet 2.0 7, SegNet's
    # DenseImageData 1, two-stage detectors 3 (Proposal, PSROIPooling,
    # ROIAlign); WeightsOnly* 4.
    assert len(names) == 63 + 12 + 4 + 4 + 1 + 7 + 1 + 3 + 4
    for name in ("BlobProto", "Datum", "NetParameter", "SolverParameter", "SolverState",
                 "LayerParameter", "V1LayerParameter", "V0LayerParameter", "ConvolutionParameter"):
        assert name in names
    assert caffe_pb2.DESCRIPTOR.package == "keras_caffe.caffe"
    assert caffe_pb2.DESCRIPTOR.name == "keras_caffe/proto/caffe.proto"


# Field numbers from BVLC Caffe (master 9b891540), spot-checked: a wrong one
# silently corrupts every binary file.
NUMBERS = {
    ("BlobProto", "data"): 5, ("BlobProto", "shape"): 7, ("BlobProto", "double_data"): 8,
    ("BlobShape", "dim"): 1, ("Datum", "encoded"): 7, ("Datum", "float_data"): 6,
    ("NetParameter", "layer"): 100, ("NetParameter", "layers"): 2,
    ("NetParameter", "input_shape"): 8,
    ("LayerParameter", "convolution_param"): 106, ("LayerParameter", "batch_norm_param"): 139,
    ("LayerParameter", "param"): 6, ("LayerParameter", "blobs"): 7, ("LayerParameter", "phase"): 10,
    ("LayerParameter", "transform_param"): 100, ("LayerParameter", "clip_param"): 148,
    ("SolverParameter", "type"): 40, ("SolverParameter", "iter_size"): 36,
    ("SolverParameter", "clip_gradients"): 35, ("SolverParameter", "stepvalue"): 34,
    ("SolverParameter", "momentum2"): 39, ("SolverParameter", "rms_decay"): 38,
    ("SolverParameter", "solver_type"): 30, ("SolverParameter", "layer_wise_reduce"): 41,
    ("SolverState", "history"): 3, ("SolverState", "current_step"): 4,
    ("ParamSpec", "lr_mult"): 3, ("ParamSpec", "decay_mult"): 4,
    ("V1LayerParameter", "blobs_lr"): 7, ("V1LayerParameter", "type"): 5,
    # the forks' own numbers, where BVLC leaves them free
    ("LayerParameter", "permute_param"): 202, ("LayerParameter", "prior_box_param"): 203,
    ("LayerParameter", "detection_output_param"): 204, ("LayerParameter", "norm_param"): 206,
    ("LayerParameter", "shuffle_channel_param"): 164, ("LayerParameter", "bn_param"): 45,
    ("LayerParameter", "roi_pooling_param"): 8266711, ("LayerParameter", "upsample_param"): 149,
    ("LayerParameter", "video_data_param"): 6660, ("VideoDataParameter", "new_length"): 13,
    ("VideoDataParameter", "use_image"): 15, ("VideoDataParameter", "num_of_labels"): 21,
    ("DetectionOutputParameter", "keep_top_k"): 7, ("PriorBoxParameter", "offset"): 13,
    # the weights-only schema: what every fork agrees on
    ("WeightsOnlyNet", "layer"): 100, ("WeightsOnlyNet", "layers"): 2,
    ("WeightsOnlyLayer", "blobs"): 7, ("WeightsOnlyV1Layer", "blobs"): 6,
    ("WeightsOnlyV1Layer", "layer"): 1, ("WeightsOnlyV0Layer", "blobs"): 50,
}


@pytest.mark.parametrize("message, field", list(NUMBERS))
def test_field_numbers(message, field):
    descriptor = caffe_pb2.DESCRIPTOR.message_types_by_name[message]
    assert descriptor.fields_by_name[field].number == NUMBERS[(message, field)]


def test_defaults_are_caffes():
    solver = caffe_pb2.SolverParameter()
    assert (solver.type, solver.delta, solver.momentum2, solver.rms_decay) == (
        "SGD", pytest.approx(1e-8), pytest.approx(0.999), pytest.approx(0.99))
    assert solver.clip_gradients == -1 and solver.iter_size == 1 and solver.average_loss == 1
    assert solver.snapshot_format == caffe_pb2.SolverParameter.BINARYPROTO
    assert solver.solver_mode == caffe_pb2.SolverParameter.GPU
    assert caffe_pb2.ConvolutionParameter().bias_term is True
    assert caffe_pb2.BatchNormParameter().moving_average_fraction == pytest.approx(0.999)


BINARIES = [
    ("solvers/sgd/init.caffemodel", caffe_pb2.NetParameter),
    ("solvers/adam/bin_run/snap_iter_30.caffemodel", caffe_pb2.NetParameter),
    ("solvers/adam/bin_run/snap_iter_30.solverstate", caffe_pb2.SolverState),
    ("snapshot/sgd_binaryproto/snap/run_iter_10.solverstate", caffe_pb2.SolverState),
    ("lmdb/mean.binaryproto", caffe_pb2.BlobProto),
    ("forward/lenet/weights.caffemodel", caffe_pb2.NetParameter),
]


@pytest.mark.parametrize("relative, message", BINARIES, ids=[b[0] for b in BINARIES])
def test_caffe_binaries_read_and_write_back_byte_identical(golden, relative, message):
    path = golden / relative
    proto = read_binary(path, message)
    assert proto.ByteSize() > 0
    assert proto.SerializeToString() == path.read_bytes()


def test_adam_solverstate_holds_m_then_v(golden):
    state = read_binary(golden / "solvers/adam/bin_run/snap_iter_30.solverstate",
                        caffe_pb2.SolverState)
    assert state.iter == 30
    assert [list(h.shape.dim) for h in state.history] == [[16, 20], [16], [5, 16], [5]] * 2


def test_golden_prototxts_parse(golden):
    nets = sorted((golden / "forward").glob("*/*.prototxt"))
    assert len(nets) >= 12
    for path in nets:
        net = read_text(path, caffe_pb2.NetParameter)
        assert len(net.layer) + len(net.layers) > 0, path
    v1 = read_text(golden / "forward/nin_cifar10/original_train_val.prototxt", caffe_pb2.NetParameter)
    assert v1.layers[0].type == caffe_pb2.V1LayerParameter.DATA


def test_truncated_binary_is_our_error(golden, tmp_path):
    broken = tmp_path / "broken.caffemodel"
    broken.write_bytes((golden / "solvers/sgd/init.caffemodel").read_bytes()[:-7])
    with pytest.raises(ProtoParseError, match=rf"^{broken}: truncated at byte 2037 of at least "
                                              r"2044 \(its field `layer` at byte 1993 runs to "
                                              r"byte 2044\)"):
        read_binary(broken, caffe_pb2.NetParameter)
