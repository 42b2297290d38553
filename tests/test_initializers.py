"""Caffe's fillers (filler.hpp) as keras_caffe.initializers.CaffeFiller."""

import math

import keras
import numpy as np
import pytest

import keras_caffe
from keras_caffe.initializers import CaffeFiller, from_filler
from keras_caffe.proto import caffe_pb2


def filler(**fields):
    return caffe_pb2.FillerParameter(**fields)


def draw(init, shape):
    return keras.ops.convert_to_numpy(init(shape))


def test_constant_and_default_are_exact():
    np.testing.assert_array_equal(draw(from_filler(filler(type="constant", value=0.25), (4, 3)), (3, 4)),
                                  np.full((3, 4), 0.25, "float32"))
    # Caffe's FillerParameter defaults to constant 0.
    assert not draw(from_filler(caffe_pb2.FillerParameter(), (4, 3)), (3, 4)).any()


def test_uniform_and_gaussian():
    u = draw(from_filler(filler(type="uniform", min=-2, max=3), (100, 100)), (100, 100))
    assert u.min() >= -2 and u.max() <= 3 and abs(u.mean() - 0.5) < 0.1
    g = draw(from_filler(filler(type="gaussian", mean=1.0, std=0.5), (200, 100)), (100, 200))
    assert abs(g.mean() - 1.0) < 0.02 and abs(g.std() - 0.5) < 0.02


def test_sparse_gaussian_keeps_sparse_over_num_outputs():
    init = from_filler(filler(type="gaussian", std=1.0, sparse=5), (50, 400))  # keep 5/50
    values = draw(init, (400, 50))
    assert abs((values != 0).mean() - 0.1) < 0.01


@pytest.mark.parametrize("norm, n", [("FAN_IN", 3 * 5 * 5), ("FAN_OUT", 64 * 5 * 5),
                                     ("AVERAGE", (3 * 25 + 64 * 25) / 2)])
def test_xavier_and_msra_count_fans_on_the_caffe_blob(norm, n):
    caffe_shape = (64, 3, 5, 5)  # a conv weight: fan_in = 3*5*5, fan_out = 64*5*5
    keras_shape = (5, 5, 3, 64)
    enum = caffe_pb2.FillerParameter.VarianceNorm.Value(norm)
    xavier = draw(from_filler(filler(type="xavier", variance_norm=enum), caffe_shape), keras_shape)
    bound = math.sqrt(3.0 / n)
    assert np.abs(xavier).max() <= bound and np.abs(xavier).max() > 0.95 * bound
    msra = draw(from_filler(filler(type="msra", variance_norm=enum), caffe_shape), keras_shape)
    assert abs(msra.std() - math.sqrt(2.0 / n)) < 0.05 * math.sqrt(2.0 / n)


def test_positive_unitball_sums_to_one_per_output():
    values = draw(from_filler(filler(type="positive_unitball"), (8, 30)), (30, 8))
    assert (values >= 0).all()
    np.testing.assert_allclose(values.sum(axis=0), np.ones(8), rtol=1e-5)


@pytest.mark.parametrize("k", [3, 4, 16])
def test_bilinear_matches_caffes_loop(k):
    """BilinearFiller: for each i of the blob, x = i % k, y = (i / k) % k."""
    f = math.ceil(k / 2)
    c = (2 * f - 1 - f % 2) / (2 * f)
    caffe = np.array([(1 - abs((i % k) / f - c)) * (1 - abs(((i // k) % k) / f - c))
                      for i in range(k * k)]).reshape(k, k)  # Caffe's (y, x)
    values = draw(CaffeFiller(type="bilinear"), (k, k, 2, 3))  # Keras: spatial first
    for o in range(2):
        for i in range(3):
            np.testing.assert_allclose(values[:, :, o, i], caffe, rtol=1e-6)


def test_bad_filler_type():
    with pytest.raises(ValueError, match="unknown filler type 'orthogonal'"):
        CaffeFiller(type="orthogonal")


def test_imported_net_starts_from_its_fillers(golden, tmp_path):
    """LeNet's prototxt says xavier for weights, constant 0 for biases."""
    model = keras_caffe.import_model(golden / "forward" / "lenet" / "deploy_used.prototxt")
    conv1 = model.get_layer("conv1")
    kernel, bias = conv1.get_weights()
    assert not bias.any()
    bound = math.sqrt(3.0 / (1 * 5 * 5))
    assert np.abs(kernel).max() <= bound and np.abs(kernel).max() > 0.5 * bound
    assert conv1.kernel_initializer.get_config()["fan_in"] == 25
    model.save(tmp_path / "lenet.keras")
    loaded = keras.models.load_model(tmp_path / "lenet.keras")
    assert isinstance(loaded.get_layer("conv1").kernel_initializer, CaffeFiller)


def test_a_seed_repeats_its_sequence_of_draws_and_no_draw_repeats():
    """The same seed gives the same draws in order; successive draws and the
    sparse mask's draw differ from each other."""
    first, second = (CaffeFiller(type="gaussian", std=1.0, seed=7) for _ in range(2))
    a1, a2 = draw(first, (50, 4)), draw(first, (50, 4))
    np.testing.assert_array_equal(a1, draw(second, (50, 4)))
    np.testing.assert_array_equal(a2, draw(second, (50, 4)))
    assert not np.allclose(a1, a2)
    sparse = draw(CaffeFiller(type="gaussian", sparse=2, num_outputs=4, seed=7), (200, 4))
    assert 0.3 < (sparse == 0).mean() < 0.7   # keep 2/4: a mask independent of the values


def test_unseeded_fillers_follow_keras_set_random_seed():
    keras.utils.set_random_seed(3)
    a = draw(CaffeFiller(type="uniform"), (10,))
    keras.utils.set_random_seed(3)
    np.testing.assert_array_equal(a, draw(CaffeFiller(type="uniform"), (10,)))


@pytest.mark.tensorflow_only
def test_a_filler_owns_no_tensorflow_variable():
    """A filler is plain Python until drawn: a net of hundreds of layers must
    not create one random-state variable per filler (import time)."""
    import tensorflow as tf

    created = []
    with tf.variable_creator_scope(lambda next_creator, **kw: created.append(kw) or next_creator(**kw)):
        init = from_filler(filler(type="xavier"), (4, 3, 3, 3))
        draw(init, (3, 3, 3, 4))
    assert created == []
