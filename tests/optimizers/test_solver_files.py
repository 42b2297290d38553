"""optimizer_from_solver: Caffe solver files -> optimizers, and bad files."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import keras_caffe
from keras_caffe import schedules
from keras_caffe.errors import KerasCaffeError, ProtoParseError, SolverError

EXPECTED = {
    "sgd": (keras_caffe.SGD, {"momentum": 0.9}),
    "nesterov": (keras_caffe.Nesterov, {"momentum": 0.9}),
    "adagrad": (keras_caffe.AdaGrad, {"delta": 1e-8}),
    "rmsprop": (keras_caffe.RMSProp, {"rms_decay": 0.98, "delta": 1e-8}),
    "adadelta": (keras_caffe.AdaDelta, {"momentum": 0.95, "delta": 1e-6}),
    "adam": (keras_caffe.Adam, {"momentum": 0.9, "momentum2": 0.999, "delta": 1e-8}),
    "sgd_l1": (keras_caffe.SGD, {"regularization_type": "L1"}),
    "sgd_clip": (keras_caffe.SGD, {"clip_gradients": 0.1}),
    "sgd_itersize2": (keras_caffe.SGD, {"iter_size": 2}),
}


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_golden_solver_files(golden, case):
    cls, expected = EXPECTED[case]
    optimizer = keras_caffe.optimizer_from_solver(golden / "solvers" / case / "solver.prototxt")
    assert type(optimizer) is cls
    for name, value in expected.items():
        expect = value if isinstance(value, str) else pytest.approx(value, rel=1e-6)
        assert getattr(optimizer, name) == expect, name
    assert optimizer.caffe_weight_decay == pytest.approx(5e-4, rel=1e-6)
    assert isinstance(optimizer._learning_rate, schedules.Fixed)


def test_defaults_follow_caffe():
    optimizer = keras_caffe.optimizer_from_solver('base_lr: 0.01 lr_policy: "fixed"')
    assert type(optimizer) is keras_caffe.SGD
    assert optimizer.momentum == 0 and optimizer.caffe_weight_decay == 0
    assert optimizer.clip_gradients is None  # Caffe's clip_gradients: -1
    assert optimizer.iter_size == 1 and optimizer.regularization_type == "L2"
    adam = keras_caffe.optimizer_from_solver('type: "Adam" base_lr: 0.01 lr_policy: "fixed"')
    assert adam.momentum == 0.0  # Caffe's proto default, as Caffe reads it
    assert adam.momentum2 == pytest.approx(0.999) and adam.delta == pytest.approx(1e-8)


@pytest.mark.parametrize(
    "enum, cls",
    [("SGD", keras_caffe.SGD), ("NESTEROV", keras_caffe.Nesterov),
     ("ADAGRAD", keras_caffe.AdaGrad), ("RMSPROP", keras_caffe.RMSProp),
     ("ADADELTA", keras_caffe.AdaDelta), ("ADAM", keras_caffe.Adam)],
)
def test_legacy_solver_type(enum, cls):
    text = f'base_lr: 0.1 lr_policy: "fixed" solver_type: {enum}'
    assert type(keras_caffe.optimizer_from_solver(text)) is cls


def test_legacy_and_new_type_together_is_refused():
    with pytest.raises(SolverError, match="both the legacy `solver_type` enum and `type`"):
        keras_caffe.optimizer_from_solver('base_lr: 0.1 lr_policy: "fixed" type: "SGD" solver_type: ADAM')


def test_overrides_win_and_multipliers_pass_through(golden):
    optimizer = keras_caffe.optimizer_from_solver(
        golden / "solvers" / "sgd" / "solver.prototxt",
        momentum=0.5, lr_mult={"*/bias": 2.0}, decay_mult={"*/bias": 0.0},
    )
    assert optimizer.momentum == 0.5
    assert optimizer.lr_mult == {"*/bias": 2.0} and optimizer.decay_mult == {"*/bias": 0.0}


def test_path_text_and_message_inputs(golden, tmp_path):
    from keras_caffe.importers import read_solver

    path = golden / "solvers" / "adam" / "solver.prototxt"
    param, source = read_solver(path)
    assert source == str(path)
    for form in (path, str(path), path.read_text(), param):
        assert type(keras_caffe.optimizer_from_solver(form)) is keras_caffe.Adam
    with pytest.raises(FileNotFoundError):
        keras_caffe.optimizer_from_solver(tmp_path / "missing.prototxt")
    with pytest.raises(FileNotFoundError):
        keras_caffe.optimizer_from_solver("missing_solver.prototxt")


def test_syntax_error_names_file_line_column(tmp_path):
    path = tmp_path / "solver.prototxt"
    path.write_text('net: "train.prototxt"\nbase_lr: 0.01\nlr_policy "step"\n')
    with pytest.raises(ProtoParseError) as info:
        keras_caffe.optimizer_from_solver(path)
    err = info.value
    assert (err.source, err.line, err.column) == (str(path), 3, 11)
    assert str(err).startswith(f"{path}:3:11: ")
    assert "keras_caffe.caffe" not in str(err)


def test_unknown_field_names_line(tmp_path):
    path = tmp_path / "solver.prototxt"
    path.write_text('base_lr: 0.01\nlearning_rate: 0.1\n')
    with pytest.raises(ProtoParseError, match=rf'^{path}:2:1: .*SolverParameter.*"learning_rate"'):
        keras_caffe.optimizer_from_solver(path)


def test_binary_file_is_reported_as_such(golden):
    with pytest.raises(ProtoParseError, match="init.caffemodel"):
        keras_caffe.optimizer_from_solver(golden / "solvers" / "sgd" / "init.caffemodel")


def test_unknown_type_lists_valid_ones():
    with pytest.raises(SolverError) as info:
        keras_caffe.optimizer_from_solver('type: "LARS" base_lr: 0.1 lr_policy: "fixed"')
    assert str(info.value) == (
        "<solver text>: unknown solver type 'LARS'; "
        "valid types: SGD, Nesterov, AdaGrad, RMSProp, AdaDelta, Adam"
    )


@pytest.mark.parametrize("solver_type", ["AdaGrad", "RMSProp"])
def test_momentum_refused_where_caffe_refuses_it(solver_type):
    with pytest.raises(SolverError, match=f"momentum cannot be used with {solver_type}"):
        keras_caffe.optimizer_from_solver(
            f'type: "{solver_type}" base_lr: 0.1 lr_policy: "fixed" momentum: 0.9'
        )


@pytest.mark.parametrize(
    "line, argument",
    [("momentum: -0.9", "momentum"), ("weight_decay: -1e-4", "weight_decay"),
     ("weight_decay: nan", "weight_decay"), ("base_lr: -0.1", "base_lr"),
     ('regularization_type: "L3"', "regularization_type"), ("iter_size: 0", "iter_size"),
     ("delta: -1", "delta")],
)
def test_bad_values_name_file_and_field(line, argument):
    text = f'type: "SGD" lr_policy: "fixed" base_lr: 0.1\n{line}\n'
    if argument == "delta":
        text = text.replace('"SGD"', '"Adam"')
    if argument == "base_lr":
        text = 'lr_policy: "fixed"\n' + line
    with pytest.raises(SolverError) as info:
        keras_caffe.optimizer_from_solver(text)
    assert str(info.value).startswith("<solver text>: ")
    assert f"`{argument}`" in str(info.value)


FIELDS = ["base_lr", "momentum", "lr_policy", "gamma", "stepsize", "type", "weight_decay",
          "stepvalue", "power", "max_iter", "iter_size", "clip_gradients", "solver_type"]
VALUES = ["0.1", "-3", "nan", "inf", '"step"', '"fixed"', '"poly"', '"Adam"', "SGD", "ADAM",
          "1e40", '"', "{", "}", "2147483648", "-1"]


@given(st.lists(st.tuples(st.sampled_from(FIELDS), st.sampled_from(VALUES)), max_size=8),
       st.text(max_size=20))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_fuzzed_solver_text_only_raises_our_errors(pairs, noise):
    """Whatever the text, the outcome is an optimizer or a KerasCaffeError."""
    text = "\n".join(f"{k}: {v}" for k, v in pairs) + "\n" + noise
    try:
        optimizer = keras_caffe.optimizer_from_solver(text + "\n# :")
    except KerasCaffeError:
        return
    assert isinstance(optimizer, keras_caffe.CaffeOptimizer)
