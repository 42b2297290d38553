"""``iter_size`` summed on each device, one all-reduce per update, under
``keras.distribution.DataParallel`` (JAX): ``keras_caffe.data_parallel``'s
``with_local_sums`` (model.fit) and ``local_sums_step`` (a custom loop).

N virtual CPU devices (2 and 4, each count in a fresh process, both run at
once: ``XLA_FLAGS=--xla_force_host_platform_device_count=N``) must train
like one device with the same global batch for each solver and YellowFin
with iter_size 2, clipping that clips, lr_mult 2 and 0, and weight decay
(support/jax_local_sums_case.py trains and compares); and the compiled
steps must all-reduce the gradients once per update, in the update branch,
never on a micro-batch between updates (counted in the compiled HLO). Then
Caffe's multi-GPU semantics where they differ from one device: each device
chunk draws its own dropout masks and normalizes by its own batch
statistics. Not bit for bit: the devices' partial sums add in another order.
"""

import json

import keras
import numpy as np
import pytest

from support import REPO
from support.virtual_devices import (CASES, DEVICES, JAX_ONLY, RTOL, WEIGHT_ATOL,
                                     check_like_one_device, finish, start)

pytestmark = JAX_ONLY

CASE_SCRIPT = REPO / "tests" / "support" / "jax_local_sums_case.py"
# The one all-reduce per update: conv1's kernel and bias, ip1's kernel, ip2's
# kernel and bias; not ip1's bias (lr_mult 0: no gradient is summed for it).
REDUCED = sorted([3 * 3 * 2 * 3, 3, 48 * 5, 5 * 3, 3])

_runs = {}


def run_case_scripts(tmp_path_factory):
    """Both device counts' results, the two processes run at once, once."""
    if not _runs:
        started = {}
        for devices in DEVICES:
            out = tmp_path_factory.mktemp(f"local_sums_{devices}")
            started[devices] = out, start(CASE_SCRIPT, out, devices, devices, *CASES)
        for devices, (out, process) in started.items():
            finish(process, f"case script ({devices} devices)")
            with open(out / "result.json") as f:
                _runs[devices] = json.load(f), np.load(out / "arrays.npz")
    return _runs


def results(devices, tmp_path_factory):
    return run_case_scripts(tmp_path_factory)[devices]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("devices", DEVICES)
def test_fit_with_local_sums_trains_like_one_device(tmp_path_factory, devices, case):
    """with_local_sums's model.fit over N devices ends where Keras's fit on one
    device with the same global batch does: weights, optimizer state (the
    iterations and iter_size's micro-step counter exactly), the logged loss;
    the per-device sums are [N, ...], sharded over the batch axis, and empty
    after the 4th update."""
    result, arrays = results(devices, tmp_path_factory)
    assert result["devices"] == devices
    check_like_one_device(result, arrays, case, "fit")
    fit = result["cases"][case]["fit"]
    assert fit["iterations"] == [4, 4]
    assert fit["losses"][1] == pytest.approx(fit["losses"][0], rel=RTOL)
    assert fit["sums_shapes"] == [[devices, 3, 3, 2, 3], [devices, 3], [devices, 48, 5],
                                  [devices, 5, 3], [devices, 3]]
    assert fit["sums_sharding"] == "P('batch', None, None, None, None)"
    assert fit["sums_max"] == 0.0
    assert fit["micro_step"] == 8


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("devices", DEVICES)
def test_custom_loop_with_local_sums_step_trains_like_one_device(tmp_path_factory, devices,
                                                                 case):
    """local_sums_step under jax.jit, 8 global batches sharded over N devices,
    ends where Keras's fit on one device does."""
    result, arrays = results(devices, tmp_path_factory)
    check_like_one_device(result, arrays, case, "loop")


@pytest.mark.parametrize("devices", DEVICES)
def test_the_clipping_clips(tmp_path_factory, devices):
    """The first update's summed gradient norm exceeds clip_gradients 0.05,
    so the cases above compare clipped updates (clipping of the reduced sum)."""
    result, _ = results(devices, tmp_path_factory)
    assert result["clip_gradients"] == 0.05
    assert result["first_update_norm"] == pytest.approx(4.0609, abs=1e-3)


@pytest.mark.parametrize("devices", DEVICES)
def test_custom_step_all_reduces_once_per_update(tmp_path_factory, devices):
    """The compiled local_sums_step with iter_size 2: one all-reduce (the
    gradients, fused), inside the update branch; none in the accumulate
    branch or outside (the chunk losses stay on their devices). iter_size 1:
    the one all-reduce on every step. YellowFin's statistics add none."""
    result, _ = results(devices, tmp_path_factory)
    for case in ("sgd", "yellowfin"):
        found = result["all_reduces"][f"{case}_iter_size_2"]
        assert found["has_cond"], case
        assert found["update"] == [REDUCED], case
        assert found["accumulate"] == [] and found["every_step"] == [], case
        assert found["gradient_elements"] == sum(REDUCED) + 5  # + ip1's frozen bias
        found = result["all_reduces"][f"{case}_iter_size_1"]
        assert found["every_step"] == [REDUCED], case
        assert found["update"] == found["accumulate"] == [], case


@pytest.mark.parametrize("devices", DEVICES)
def test_fit_steps_all_reduce_the_gradients_once_per_update(tmp_path_factory, devices):
    """with_local_sums's own compiled train step in model.fit (XLA's HLO after
    its passes), one per case: the gradients' one all-reduce in the update
    branch, none in the accumulate branch; on every step only the logged
    loss (one scalar: the mean of the device chunks' losses)."""
    result, _ = results(devices, tmp_path_factory)
    steps = result["fit_all_reduces"]
    assert len(steps) == len(CASES)
    for case, found in zip(CASES, steps):
        assert found["has_cond"], case
        assert found["update"] == [REDUCED], case
        assert found["accumulate"] == [], case
        assert found["every_step"] == [[1]], case


@pytest.mark.parametrize("devices", DEVICES)
def test_dropout_draws_other_masks_on_each_device_chunk(tmp_path_factory, devices):
    """Every device chunk holds the same rows: chunk 0 draws the model's own
    masks (its loss is one device's on those rows), every other chunk its
    own (all chunk losses differ); the seed state advances as on one device."""
    found = results(devices, tmp_path_factory)[0]["dropout"]
    losses = found["chunk_losses"]
    assert len(losses) == devices
    assert losses[0] == pytest.approx(found["one_device_loss"], rel=1e-6)
    assert len({round(v, 3) for v in losses}) == devices, losses
    assert found["seed_before"] == [5, 0]
    assert found["seed_after"] == found["seed_after_one_device"] == [5, 1]


@pytest.mark.parametrize("devices", DEVICES)
def test_batch_norm_normalizes_by_each_device_chunk(tmp_path_factory, devices):
    """Caffe's multi-GPU BatchNorm: each chunk normalized by its own mean and
    (biased) variance; the moving statistics the mean of the devices' updates
    (momentum 0.5): the moving mean as one device's, the moving variance the
    chunks' mean variance, not the global batch's. Their all-reduce runs on
    every step, the gradient's (the kernel's 2 elements) once per update."""
    result, arrays = results(devices, tmp_path_factory)
    found = result["batch_norm"]
    x = arrays["bn/x"].astype("float64").reshape(devices, 4, 2)
    mean, var = x.mean(axis=1), x.var(axis=1)
    z = (x - mean[:, None]) / np.sqrt(var[:, None] + 1e-3)
    expected = np.mean(np.sum(z, axis=2) ** 2, axis=1)
    np.testing.assert_allclose(found["chunk_losses"], expected, rtol=1e-5)
    np.testing.assert_allclose(found["stats"]["moving_mean"], 0.5 * mean.mean(axis=0),
                               rtol=1e-5)
    np.testing.assert_allclose(found["stats"]["moving_variance"],
                               0.5 + 0.5 * var.mean(axis=0), rtol=1e-5)
    global_var = x.reshape(-1, 2).var(axis=0)
    assert np.all(np.abs(found["stats"]["moving_variance"] - (0.5 + 0.5 * global_var)) > 0.1)
    assert found["all_reduces"]["every_step"] == [[2, 2]]
    assert found["all_reduces"]["update"] == [[2]]
    assert found["all_reduces"]["accumulate"] == []


@pytest.mark.parametrize("devices", DEVICES)
def test_iter_size_1_is_keras_own_step(tmp_path_factory, devices):
    """With iter_size 1 every step updates: with_local_sums's model keeps
    Keras's own train step, adds no variable, and trains bit for bit as the
    plain model under the same DataParallel."""
    found = results(devices, tmp_path_factory)[0]["iter_size_1"]
    assert found == {"identical": True, "losses": [found["losses"][1]] * 2, "own_variables": 0}


@pytest.mark.parametrize("devices", DEVICES)
def test_a_batch_not_divisible_by_the_devices_is_refused(tmp_path_factory, devices):
    """A global batch of N + 1 rows: keras-caffe's ArgumentError naming it."""
    found = results(devices, tmp_path_factory)[0]["errors"]["batch"]
    assert found == {
        "type": "ArgumentError", "is_argument_error": True,
        "message": f"keras_caffe.data_parallel.local_sums_step: `batch` has {devices + 1} rows, "
                   f"not a multiple of the {devices} devices on the batch axis 'batch'"}


@pytest.mark.parametrize("devices", DEVICES)
def test_fit_refuses_batches_the_devices_cannot_share(tmp_path_factory, devices):
    """model.fit with batch_size N + 1, and fit outside the DataParallel the
    model was compiled under: keras-caffe's ArgumentError, before Keras or
    JAX fails."""
    found = results(devices, tmp_path_factory)[0]["errors"]["fit"]
    owner = "keras_caffe.data_parallel.with_local_sums"
    assert found["batch_size"] == {
        "type": "ArgumentError", "is_argument_error": True,
        "message": f"{owner}: `batch_size` gives global batches of {devices + 1} rows, not a "
                   f"multiple of the {devices} devices on the batch axis 'batch'"}
    assert found["distribution"] == {
        "type": "ArgumentError", "is_argument_error": True,
        "message": f"{owner}: `distribution` is not the DataParallel ({devices} devices) the "
                   "model was compiled under: fit under its scope"}


@pytest.mark.parametrize("devices", DEVICES)
def test_a_saved_model_loads_and_trains_on_alike(tmp_path_factory, devices):
    """A with_local_sums model saved as .keras after 4 updates loads as one
    (its sums recreated, sharded), and one more epoch of each ends at the
    same weights (the optimizer's state came back: 8 updates)."""
    found = results(devices, tmp_path_factory)[0]["saved"]
    assert found["type"] == "LocalSums"
    assert found["sums_sharding"] == "P('batch', None, None, None, None)"
    assert found["iterations"] == 8
    assert found["rel"] <= 1e-6


@pytest.mark.parametrize("devices", DEVICES)
def test_a_two_output_net_fits_and_logs_like_one_device(tmp_path_factory, devices):
    """Two outputs (mse and mae, loss weights 1 and 0.5, a metric on one):
    the weights, the loss, each output's loss and the metric as Keras's fit
    on one device logs them."""
    found = results(devices, tmp_path_factory)[0]["two_outputs"]
    assert found["rel"] <= 1e-4 and found["abs"] <= WEIGHT_ATOL
    one, many = found["logs"]
    assert sorted(one) == sorted(many) == ["loss", "out_a_loss", "out_a_mae", "out_b_loss"]
    for key in one:
        assert many[key] == pytest.approx(one[key], rel=RTOL), key


# -- in this process (one device): what needs no mesh ----------------------


def small_net():
    keras.utils.set_random_seed(3)
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="ip")])


def test_a_subclassed_model_is_refused():
    """with_local_sums rebuilds the model from its symbolic inputs and
    outputs: a subclassed model has none."""
    from keras_caffe.data_parallel import with_local_sums
    from keras_caffe.errors import ArgumentError

    class Net(keras.Model):
        def __init__(self):
            super().__init__(name="net")
            self.dense = keras.layers.Dense(2)

        def call(self, x):
            return self.dense(x)

    net = Net()
    net(np.zeros((1, 3), "float32"))
    with pytest.raises(ArgumentError) as raised:
        with_local_sums(net)
    assert str(raised.value) == (
        "keras_caffe.data_parallel.with_local_sums: `model` must be a built functional or "
        "Sequential model, got Net 'net' without symbolic inputs and outputs (a subclassed "
        "model: train it with keras_caffe.data_parallel.local_sums_step)")
    with pytest.raises(ArgumentError) as raised:
        with_local_sums("net")
    assert str(raised.value) == ("keras_caffe.data_parallel.with_local_sums: `model` must be "
                                 "a keras.Model, got str")


def test_a_keras_optimizer_under_data_parallel_is_refused():
    """apply_summed is Caffe's update from a reduced sum: a Keras optimizer
    has none, so compile under DataParallel refuses it."""
    from keras_caffe.data_parallel import with_local_sums
    from keras_caffe.errors import ArgumentError

    with keras.distribution.DataParallel(devices=keras.distribution.list_devices()).scope():
        trainer = with_local_sums(small_net())
        with pytest.raises(ArgumentError) as raised:
            trainer.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    assert str(raised.value) == (
        "keras_caffe.data_parallel.with_local_sums: `optimizer` must be a keras-caffe solver "
        "(SGD, Nesterov, AdaGrad, RMSProp, AdaDelta, Adam, YellowFin), got SGD")


def test_the_custom_step_needs_a_data_parallel_distribution():
    """local_sums_step outside any distribution's scope: nothing to split the
    batch over."""
    import keras_caffe
    from keras_caffe.data_parallel import local_sums_step
    from keras_caffe.errors import ArgumentError

    with pytest.raises(ArgumentError) as raised:
        local_sums_step(small_net(), keras.losses.MeanSquaredError(),
                        keras_caffe.SGD(learning_rate=0.1, iter_size=2))
    assert str(raised.value) == (
        "keras_caffe.data_parallel.local_sums_step: `distribution` must be a "
        "keras.distribution.DataParallel (set with its scope()), got NoneType")


def test_without_a_distribution_it_is_keras_own_fit():
    """No distribution: Keras's own train step, no variable added, the same
    numbers as the plain model's fit."""
    import keras_caffe
    from keras_caffe.data_parallel import with_local_sums

    rng = np.random.RandomState(0)
    x, y = rng.randn(8, 3).astype("float32"), rng.randn(8, 2).astype("float32")
    weights = []
    for wrap in (False, True):
        net = small_net()
        model = with_local_sums(net) if wrap else net
        model.compile(optimizer=keras_caffe.SGD(learning_rate=0.1, iter_size=2), loss="mse")
        model.fit(x, y, batch_size=4, shuffle=False, verbose=0)
        assert len(model.non_trainable_variables) == 0
        weights.append([np.asarray(v.value) for v in net.trainable_variables])
    for a, b in zip(*weights):
        np.testing.assert_array_equal(a, b)
