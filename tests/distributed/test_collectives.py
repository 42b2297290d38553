"""The collectives keras_caffe.distributed issues, under a real ``horovodrun -np 2``.

One launch of collectives_worker.py (Gloo, CPU) records op counts of traced
train steps, the results of ``reduce_gradients``, ``MetricAverage``'s logs
and the state around ``broadcast_state`` on both ranks; the tests compare
them with what the two ranks sent.
"""

import json

import numpy as np
import pytest
from support.horovod_jobs import HERE, check, horovodrun, require_horovod

WORKER = HERE / "collectives_worker.py"
RANK_SEED_STRIDE = 1000003


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """[(report, arrays)] of rank 0 and rank 1."""
    require_horovod()
    out = tmp_path_factory.mktemp("collectives")
    check(horovodrun([WORKER, out], np=2, timeout=240, cwd=out))
    return [(json.loads((out / f"rank{r}.json").read_text()), np.load(out / f"rank{r}.npz"))
            for r in (0, 1)]


def test_both_ranks_ran(ranks):
    assert [(report["rank"], report["size"]) for report, _ in ranks] == [(0, 2), (1, 2)]


@pytest.mark.parametrize("depth, variables", [(2, 4), (30, 60)])
def test_grouped_step_issues_one_collective_whatever_the_depth(ranks, depth, variables):
    """grouped=True: exactly one HorovodGroupedAllreduce in the traced step and
    no per-variable HorovodAllreduce; grouped=False: one per variable."""
    for report, _ in ranks:
        grouped, single = report["ops"][f"{depth}_grouped"], report["ops"][f"{depth}_single"]
        assert grouped == {"variables": variables, "grouped_allreduce": 1, "allreduce": 0,
                           "horovod_ops": 1}
        assert single == {"variables": variables, "grouped_allreduce": 0,
                          "allreduce": variables, "horovod_ops": variables}


def test_fp16_compression_keeps_one_collective(ranks):
    for report, _ in ranks:
        assert report["ops"]["30_grouped_fp16"] == {"variables": 60, "grouped_allreduce": 1,
                                                    "allreduce": 0, "horovod_ops": 1}


def sent(ranks, key):
    return [arrays[f"sent_{key}"] for _, arrays in ranks]


@pytest.mark.parametrize("key", ["a", "b"])
def test_average_and_sum(ranks, key):
    """average = (g0 + g1) / 2 and sum = g0 + g1, bit for bit, on both ranks,
    grouped or not; None gradients stay None."""
    g0, g1 = sent(ranks, key)
    assert not np.array_equal(g0, g1)
    for report, arrays in ranks:
        np.testing.assert_array_equal(arrays[f"average_{key}"], (g0 + g1) / np.float32(2))
        np.testing.assert_array_equal(arrays[f"average_single_{key}"], (g0 + g1) / np.float32(2))
        np.testing.assert_array_equal(arrays[f"sum_{key}"], g0 + g1)
        assert report["none_kept"] == dict.fromkeys(
            ["average", "average_single", "sum", "fp16", "fp16_sum"], True)


@pytest.mark.parametrize("key", ["a", "b"])
def test_fp16_compression_is_the_float16_rounded_average(ranks, key):
    """Each rank sends float16(g); Horovod sums in float16; the result comes
    back as float32: float32(float16(float16(g0) + float16(g1)) / 2)."""
    g0, g1 = sent(ranks, key)
    half_sum = g0.astype(np.float16) + g1.astype(np.float16)
    for report, arrays in ranks:
        assert report["fp16_dtype"] == report["fp16_sum_dtype"] == "float32"
        fp16 = arrays[f"fp16_{key}"]
        assert fp16.dtype == np.float32
        np.testing.assert_array_equal(fp16, (half_sum / np.float16(2)).astype(np.float32))
        np.testing.assert_array_equal(arrays[f"fp16_sum_{key}"], half_sum.astype(np.float32))
        exact = (g0 + g1) / np.float32(2)
        assert (fp16 != exact).mean() > 0.5  # really rounded ...
        np.testing.assert_allclose(fp16, exact, rtol=2.0 ** -10)  # ... to float16's precision


def test_metric_average(ranks):
    """Numeric scalars averaged over the ranks; strings and vectors untouched."""
    logs = [report["metric_logs"] for report, _ in ranks]
    for rank, log in enumerate(logs):
        assert log == {"loss": 1.5, "accuracy": 0.25, "count": 3.5, "name": "step",
                       "vector": [1.0, 2.0 + rank]}


def test_broadcast_state_copies_rank_0_and_offsets_the_seeds(ranks):
    (_, a0), (report, a1) = ranks
    assert report["seed_variables"] == ["seed_generator/seed_generator_state"]
    keys = sorted(k[len("before/"):] for k in a0.files if k.startswith("before/"))
    assert {k.split("_", 1)[0] for k in keys} == {"w", "opt", "seed"}
    assert len([k for k in keys if k.startswith("opt_") and k.endswith("_history")]) == 4
    differed = []
    for key in keys:
        before0, before1 = a0[f"before/{key}"], a1[f"before/{key}"]
        after0, after1 = a0[f"after/{key}"], a1[f"after/{key}"]
        if not np.array_equal(before0, before1):
            differed.append(key)
        np.testing.assert_array_equal(after0, before0, err_msg=key)  # rank 0 unchanged
        if key.startswith("seed_"):
            np.testing.assert_array_equal(after1, before0 + [RANK_SEED_STRIDE, 0], err_msg=key)
        else:
            np.testing.assert_array_equal(after1, before0, err_msg=key)
    # every weight, slot, the iteration and the seed differed before the broadcast
    # (only the learning rate was already the same)
    assert sorted(set(keys) - set(differed)) == [k for k in keys if k.endswith("learning_rate")]
    iteration = next(k for k in keys if k.endswith("/iteration"))
    assert int(a1[f"after/{iteration}"]) == 3 and int(a1[f"before/{iteration}"]) == 8


def test_load_under_horovod_wraps_the_inner_optimizer_again(ranks):
    """With more than one worker, DistributedOptimizer.from_config wraps the
    loaded inner optimizer again, and its state loads into it."""
    for report, _ in ranks:
        assert report["loaded"] == {"type": "DistributedOptimizer", "inner": "SGD", "equal": True}
