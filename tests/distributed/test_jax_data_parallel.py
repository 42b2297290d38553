"""Caffe's solvers and YellowFin under ``keras.distribution.DataParallel`` (JAX).

N virtual CPU devices (2 and 4, each count in a fresh process:
``XLA_FLAGS=--xla_force_host_platform_device_count=N``) with the global
batch split over them must train like one device with the same global batch,
in ``model.fit`` and in a custom loop on Keras's stateless JAX API, for each
solver and YellowFin with iter_size 2, clipping that clips, lr_mult 2 and 0,
and weight decay (support/jax_data_parallel_case.py trains and compares).
Not bit for bit: the devices' partial gradients are summed in another order.

The all-reduces are counted in the compiled HLO of model.fit's own train
step (XLA's dump) and of the stateless step: today every step, update or
not, all-reduces its micro-batch's gradient (one fused all-reduce of the loss
and the gradients of the parameters whose lr_mult is not 0), so iter_size k
costs k reductions per update, not Caffe's one (docs/distributed.md's "One
all-reduce per update with iter_size" holds for Horovod); YellowFin's
statistics, computed on the reduced gradient, add none.

Resuming (support/jax_data_parallel_resume.py): a snapshot taken under
DataParallel on N=2 and 4 devices (SGD and Adam in the three formats, YellowFin
in ours; iter_size 2, on an update boundary) restores on N devices and on
one (a fresh process) to the saved weights and optimizer variables bit for
bit; training on from it on N devices is the uninterrupted run bit for bit,
on one device within rtol 1e-5 (the summation order); a snapshot of one
device resumes on N likewise.
"""

import json

import numpy as np
import pytest

from support import REPO
from support.virtual_devices import (CASES, DEVICES, JAX_ONLY, RTOL, check_like_one_device,
                                     finish, parts, start)

pytestmark = JAX_ONLY

CASE_SCRIPT = REPO / "tests" / "support" / "jax_data_parallel_case.py"
# The fused all-reduce's operands: the loss, then conv1's kernel and bias,
# ip1's kernel, ip2's kernel and bias; not ip1's bias (lr_mult 0: its
# gradient is taken as 0, so nothing is reduced for it).
REDUCED_ELEMENTS = sorted([1, 3 * 3 * 2 * 3, 3, 48 * 5, 5 * 3, 3])

_runs = {}


def run_case_script(devices, tmp_path_factory):
    """The case script's results for ``devices`` devices, run once per count."""
    if devices not in _runs:
        out = tmp_path_factory.mktemp(f"data_parallel_{devices}")
        finish(start(CASE_SCRIPT, out, devices, devices, *CASES), "case script")
        with open(out / "result.json") as f:
            _runs[devices] = json.load(f), np.load(out / "arrays.npz")
    return _runs[devices]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("devices", DEVICES)
def test_fit_on_n_devices_trains_like_one_device(tmp_path_factory, devices, case):
    """model.fit under DataParallel over N devices ends where one device
    with the same global batch does (rtol 1e-5), 8 batches = 4 updates."""
    result, arrays = run_case_script(devices, tmp_path_factory)
    assert result["devices"] == devices
    check_like_one_device(result, arrays, case, "fit")
    assert result["cases"][case]["fit"]["iterations"] == [4, 4]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("devices", DEVICES)
def test_stateless_loop_on_n_devices_trains_like_one_device(tmp_path_factory, devices, case):
    """A custom loop (stateless_call, stateless_apply under jax.jit, the batch
    sharded over N devices) ends where the same loop on one device does."""
    result, arrays = run_case_script(devices, tmp_path_factory)
    check_like_one_device(result, arrays, case, "loop")
    int_state = [a for a in parts(arrays, case, "loop", "many_o") if a.dtype.kind in "iu"]
    # YellowFin's skipped steps (none); the iterations; iter_size's micro-steps
    assert sorted(int(a) for a in int_state) == [0] * (case == "yellowfin") + [4, 8]


@pytest.mark.parametrize("devices", DEVICES)
def test_the_clipping_clips(tmp_path_factory, devices):
    """The first update's summed gradient norm (the same initial weights and
    batches in every case) exceeds clip_gradients 0.05, so the cases above
    compare clipped updates."""
    result, _ = run_case_script(devices, tmp_path_factory)
    assert result["clip_gradients"] == 0.05
    assert result["first_update_norm"] == pytest.approx(4.0609, abs=1e-3)


@pytest.mark.parametrize("devices", DEVICES)
def test_every_micro_batch_step_all_reduces_its_gradient(tmp_path_factory, devices):
    """The compiled stateless step has ONE all-reduce (the loss and the
    gradients, fused) whatever iter_size: with iter_size 2 each micro-batch
    reduces, two reductions per update; YellowFin adds none to SGD's."""
    result, _ = run_case_script(devices, tmp_path_factory)
    for key in ("sgd_iter_size_1", "sgd_iter_size_2", "yellowfin_iter_size_1",
                "yellowfin_iter_size_2"):
        found = result["all_reduces"][key]
        assert found["count"] == 1, key
        assert sorted(found["operand_elements"]) == REDUCED_ELEMENTS, key
        assert found["gradient_elements"] == sum(REDUCED_ELEMENTS) - 1 + 5  # + ip1's bias


@pytest.mark.parametrize("devices", DEVICES)
def test_every_fit_step_all_reduces_its_gradient(tmp_path_factory, devices):
    """model.fit's own compiled train step under DataParallel (XLA's HLO after
    its passes), one per case (iter_size 2): one fused all-reduce of the loss
    and the gradients on every call, so two per update, as in the stateless
    step; YellowFin's is the same as the solvers'."""
    result, _ = run_case_script(devices, tmp_path_factory)
    steps = result["fit_all_reduces"]
    assert len(steps) == len(CASES)
    for case, found in zip(CASES, steps):
        assert found["count"] == 1, case
        assert sorted(found["operand_elements"]) == REDUCED_ELEMENTS, case


# -- snapshots under DataParallel, resumed on N devices and on one ------------

RESUME_SCRIPT = REPO / "tests" / "support" / "jax_data_parallel_resume.py"
#: Device counts a snapshot is resumed on (N=4 is covered by the equality tests
#: above; resuming there too cost 20 s more and showed nothing new).
RESUME_DEVICES = [2]
#: (solver, format) pairs: Caffe's formats hold Caffe's solvers only.
RESUMED = [("sgd", f) for f in ("caffe", "caffe_hdf5", "keras")] + [
    ("adam", f) for f in ("caffe", "caffe_hdf5", "keras")] + [("yellowfin", "keras")]
# Resumed on another device count: rtol 1e-5 plus, for elements near 0,
# an atol; measured beyond rtol's share: at most 9e-9 on the weights, 7.5e-9
# on the optimizer's variables (SGD's history), N=2 and 4.
RESUME_WEIGHT_ATOL, RESUME_STATE_ATOL = 1e-7, 2e-8


def _resume_script(out, devices, mode, *folders):
    finish(start(RESUME_SCRIPT, out, devices, mode, *folders), f"resume script ({mode})")
    with open(out / "result.json") as f:
        return json.load(f), np.load(out / "arrays.npz")


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    """A process per N (snapshots under DataParallel and of one device,
    resumed on N), then one fresh one-device process resuming each N's
    snapshots (``<solver>/..._<index of N>_on_one``): ``({N: many}, one)``,
    each ``(result, arrays)``."""
    outs = {n: tmp_path_factory.mktemp(f"resume_{n}") for n in RESUME_DEVICES}
    many = {n: _resume_script(out, n, "many") for n, out in outs.items()}
    one = _resume_script(tmp_path_factory.mktemp("resume_1"), 1, "one",
                         *(outs[n] / "many" for n in RESUME_DEVICES))
    return many, one


def _state(arrays, key):
    keys = sorted((k for k in arrays.files if k.rsplit("/", 1)[0] == key),
                  key=lambda k: int(k.rsplit("/", 1)[1]))
    return [arrays[k] for k in keys]


def _paths(result, solver):
    return result["weights"][solver] + result["optimizer"][solver]


def _assert_bit_for_bit(got, expected, paths):
    assert len(got) == len(expected) == len(paths)
    for g, e, path in zip(got, expected, paths):
        assert g.dtype == e.dtype, path
        np.testing.assert_array_equal(g, e, err_msg=path)


def _assert_close(got, expected, result, solver):
    """Weights and float variables within rtol 1e-5; the counters equal."""
    weights = len(result["weights"][solver])
    assert len(got) == len(expected) == len(_paths(result, solver))
    for i, (g, e, path) in enumerate(zip(got, expected, _paths(result, solver))):
        assert g.dtype == e.dtype, path
        if e.dtype.kind in "iu":  # iterations, iter_size's micro-step, YellowFin's skips
            np.testing.assert_array_equal(g, e, err_msg=path)
        else:
            np.testing.assert_allclose(g, e, rtol=RTOL, err_msg=path, atol=(
                RESUME_WEIGHT_ATOL if i < weights else RESUME_STATE_ATOL))


@pytest.mark.parametrize("devices", RESUME_DEVICES)
def test_the_resumed_runs_train_across_the_snapshot(resumed, devices):
    """The runs compared below move: on N devices and on one, the state at
    the snapshot (update 2 of 4) is not the final one, and the two
    uninterrupted runs (N devices, one) agree within rtol 1e-5."""
    result, arrays = resumed[0][devices]
    assert (result["devices"], resumed[1][0]["devices"]) == (devices, 1)
    for solver in ("sgd", "adam", "yellowfin"):
        weights = len(result["weights"][solver])
        at = weights + [p.rsplit("/", 1)[1] for p in result["optimizer"][solver]].index(
            "iteration")
        for placement in ("many", "one"):
            saved = _state(arrays, f"{solver}/saved_{placement}")
            final = _state(arrays, f"{solver}/final_{placement}")
            assert (int(saved[at]), int(final[at])) == (2, 4), (solver, placement)
            assert max(float(np.max(np.abs(a - b))) for a, b in
                       zip(saved[:weights], final[:weights])) > 0.01, (solver, placement)
        _assert_close(_state(arrays, f"{solver}/final_many"),
                      _state(arrays, f"{solver}/final_one"), result, solver)


@pytest.mark.parametrize("solver, format", RESUMED)
@pytest.mark.parametrize("devices", RESUME_DEVICES)
def test_a_data_parallel_snapshot_resumes_on_n_devices_bit_for_bit(resumed, devices, solver,
                                                                   format):
    """Restored on the N devices: the weights and optimizer variables saved
    under DataParallel, bit for bit; trained on: the uninterrupted N-device
    run, bit for bit."""
    result, arrays = resumed[0][devices]
    paths = _paths(result, solver)
    _assert_bit_for_bit(_state(arrays, f"{solver}/restored_many_on_many/{format}"),
                        _state(arrays, f"{solver}/saved_many"), paths)
    _assert_bit_for_bit(_state(arrays, f"{solver}/resumed_many_on_many/{format}"),
                        _state(arrays, f"{solver}/final_many"), paths)


@pytest.mark.parametrize("solver, format", RESUMED)
@pytest.mark.parametrize("devices", RESUME_DEVICES)
def test_a_data_parallel_snapshot_resumes_on_one_device(resumed, devices, solver, format):
    """Restored in a fresh one-device process (no distribution): the saved
    state bit for bit; trained on: the uninterrupted N-device run within
    rtol 1e-5 (one device sums the batch in another order)."""
    result, arrays = resumed[0][devices]
    one = resumed[1][1]
    index = RESUME_DEVICES.index(devices)
    _assert_bit_for_bit(_state(one, f"{solver}/restored_{index}_on_one/{format}"),
                        _state(arrays, f"{solver}/saved_many"), _paths(result, solver))
    _assert_close(_state(one, f"{solver}/resumed_{index}_on_one/{format}"),
                  _state(arrays, f"{solver}/final_many"), result, solver)


@pytest.mark.parametrize("solver, format", RESUMED)
@pytest.mark.parametrize("devices", RESUME_DEVICES)
def test_a_one_device_snapshot_resumes_on_n_devices(resumed, devices, solver, format):
    """A snapshot of one device (no distribution) restored under DataParallel
    on N devices: the saved state bit for bit; trained on: the uninterrupted
    one-device run within rtol 1e-5."""
    result, arrays = resumed[0][devices]
    _assert_bit_for_bit(_state(arrays, f"{solver}/restored_one_on_many/{format}"),
                        _state(arrays, f"{solver}/saved_one"), _paths(result, solver))
    _assert_close(_state(arrays, f"{solver}/resumed_one_on_many/{format}"),
                  _state(arrays, f"{solver}/final_one"), result, solver)
