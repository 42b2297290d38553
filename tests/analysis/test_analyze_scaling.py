"""``keras_caffe.analysis.scaling``: predicted step time and speed-up over p workers.

The tiny net's numbers are worked out by hand below; the NiN and GoogLeNet
rows are the ones docs/scaling.md quotes.
"""

import json
import math

import pytest

from keras_caffe.errors import ArgumentError
from keras_caffe.analysis import (
    DEFAULT_WORKERS,
    MB,
    Scaling,
    ScalingRow,
    analyze,
    analyze_scaling,
    parse_flops,
    parse_workers,
    scaling,
)
from support import NETS

DATA = NETS

#: Input (B, 4) -> InnerProduct 3: |W| = (4*3 + 3) x 4 bytes = 60 bytes; 12 multiply-adds a
#: sample = 24 forward FLOPs, 72 forward + backward.
TINY = """
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 4 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
  inner_product_param { num_output: 3 } }
"""
SCHEMES = ("parameter_server", "reduction_tree", "ring_allreduce")


@pytest.fixture(scope="module")
def tiny():
    """Batch 6 (432 FLOPs a step), 120 bytes/s: 2|W|/beta = 1 s, so the parameter server
    takes p s, the tree log2(p) s, the ring (p-1)/p s."""
    report = analyze(TINY, batch=6, bandwidth=120)
    assert report.weight_bytes == 60 and report.flops == 6 * 72
    return report


def test_tiny_net_by_hand(tiny):
    # device 72 FLOP/s: one sample = 1 s, the whole batch of 6 = 6 s on one worker.
    table = scaling(tiny, [1, 2, 3, 4, 6], device_flops=72)
    assert isinstance(table, Scaling) and all(isinstance(r, ScalingRow) for r in table.rows)
    assert [r.workers for r in table.rows] == [1, 2, 3, 4, 6]
    # p: (samples of the busiest worker = ceil(6/p), compute s, {scheme: communication s})
    expected = {
        1: (6, 6.0, (1.0, 0.0, 0.0)),
        2: (3, 3.0, (2.0, 1.0, 0.5)),
        3: (2, 2.0, (3.0, math.log2(3), 2 / 3)),
        4: (2, 2.0, (4.0, 2.0, 0.75)),
        6: (1, 1.0, (6.0, math.log2(6), 5 / 6)),
    }
    for row in table.rows:
        share, compute, comm = expected[row.workers]
        assert row.per_worker_batch == share
        assert row.compute_s == pytest.approx(compute, rel=1e-12)
        for key, seconds in zip(SCHEMES, comm):
            assert row.communication_s[key] == pytest.approx(seconds, rel=1e-12, abs=1e-15)
            assert row.step_s[key] == pytest.approx(compute + seconds, rel=1e-12)
            assert row.speedup[key] == pytest.approx(6.0 / (compute + seconds), rel=1e-12)
    # The headline numbers, spelled out: 6/7 for a one-worker parameter server, 6/2.75 ring at 4.
    assert table.row(1).speedup == pytest.approx(
        {"parameter_server": 6 / 7, "reduction_tree": 1.0, "ring_allreduce": 1.0})
    assert table.row(4).speedup["ring_allreduce"] == pytest.approx(6 / 2.75)
    assert table.row(6).speedup["reduction_tree"] == pytest.approx(6 / (1 + math.log2(6)))
    with pytest.raises(KeyError):
        table.row(5)


def test_overlap_takes_the_longer_of_compute_and_communication(tiny):
    table = scaling(tiny, "2,4", device_flops="72", overlap=True)
    assert table.row(2).step_s == pytest.approx(dict.fromkeys(SCHEMES, 3.0))
    assert table.row(2).speedup == pytest.approx(dict.fromkeys(SCHEMES, 2.0))
    assert table.row(4).step_s == pytest.approx(
        {"parameter_server": 4.0, "reduction_tree": 2.0, "ring_allreduce": 2.0})


def test_bandwidth_override_and_defaults(tiny):
    # 240 bytes/s halves every communication time; the report's 120 is kept otherwise.
    fast = scaling(tiny, 4, device_flops=72, bandwidth=240)
    assert fast.bandwidth == 240
    assert fast.row(4).communication_s["parameter_server"] == pytest.approx(2.0)
    assert scaling(tiny, 4, device_flops=72).bandwidth == 120
    assert DEFAULT_WORKERS == (1, 2, 4, 8, 16, 32, 64, 128)
    big = analyze(TINY, batch=1024, bandwidth="8 Gbit/s")
    assert [r.workers for r in scaling(big, device_flops="1T").rows] == list(DEFAULT_WORKERS)


def test_render_and_json(tiny):
    from rich.console import Console
    from rich.table import Table

    table = scaling(tiny, [1, 2, 3], device_flops=72)
    rich_table = table.table()
    assert isinstance(rich_table, Table)
    assert rich_table.row_count == 3 and len(rich_table.columns) == 12
    cells = [list(column.cells) for column in rich_table.columns]
    assert cells[0] == ["1", "2", "3"] and cells[1] == ["6", "3", "2"]
    assert cells[2] == ["6,000.0", "3,000.0", "2,000.0"]  # compute, ms
    assert cells[3] == ["1,000.0", "2,000.0", "3,000.0"]  # parameter server, ms
    assert cells[5] == ["0.9x", "1.2x", "1.2x"]  # 6/7, 6/5, 6/5
    assert cells[8] == ["1.0x", "1.5x", "1.7x"]  # tree: 6/6, 6/4, 6/3.585
    assert cells[11] == ["1.0x", "1.7x", "2.2x"]  # ring: 6/6, 6/3.5, 6/2.667
    console = Console(record=True, width=220)
    console.print(table)
    text = console.export_text()
    assert "reduction tree" in text and "ring all-reduce" in text and "no overlap" in text
    assert ("net: predicted step, batch 6, |W| = 0.00 MB, 432 FLOP a step, 72 FLOP/s a worker, "
            "9.6e-07 Gbit/s, no overlap") in text

    data = json.loads(json.dumps(table.to_dict()))
    assert data["batch"] == 6 and data["weight_bytes"] == 60 and data["flops_per_step"] == 432
    assert data["device_flops_per_s"] == 72 and data["bandwidth_bytes_per_s"] == 120
    assert data["overlap"] is False
    assert data["model"]["step_s"] == "compute_s + communication_s"
    assert [row["workers"] for row in data["rows"]] == [1, 2, 3]
    assert data["rows"][1] == {
        "workers": 2, "per_worker_batch": 3, "compute_s": 3.0,
        "communication_s": {"parameter_server": 2.0, "reduction_tree": 1.0,
                            "ring_allreduce": 0.5},
        "step_s": {"parameter_server": 5.0, "reduction_tree": 4.0, "ring_allreduce": 3.5},
        "speedup": {"parameter_server": 1.2, "reduction_tree": 1.5, "ring_allreduce": 6 / 3.5},
    }


# -- the command line's entry ---------------------------------------------------------------------


def test_analyze_scaling_is_what_the_command_line_prints(tmp_path):
    from rich.console import Console

    net = tmp_path / "tiny.prototxt"
    net.write_text(TINY)
    report, table = analyze_scaling(str(net), "1,2,3", "72", batch=6, bandwidth="960 b/s")
    assert report.workers == 3 and report.bandwidth == 120 and report.batch == 6
    assert table.row(3).communication_s["parameter_server"] == pytest.approx(3.0)
    console = Console(record=True, width=220)
    console.print(report)
    console.print(table)
    text = console.export_text()
    assert "data-parallel communication per step: 3" in text and "1.58496" in text
    assert "predicted step, batch 6" in text and "6,000.0" in text and "0.9x" in text
    data = report.to_dict()
    data["scaling"] = table.to_dict()
    assert json.loads(json.dumps(data))["scaling"]["rows"][2]["per_worker_batch"] == 2
    # One count and no device FLOP/s: the plain report, as before.
    report, table = analyze_scaling(str(net), 16, None, batch=64)
    assert table is None and report.workers == 16 and report.bandwidth == 1.25e9
    report, table = analyze_scaling(str(net), "4", "1G", batch=8, overlap=True)
    assert table.overlap and [r.workers for r in table.rows] == [4]


# -- FireCaffe's nets: the numbers docs/scaling.md quotes ----------------------------------------


@pytest.fixture(scope="module")
def firecaffe_nets():
    return {
        "NiN": analyze(DATA / "nin_imagenet_deploy.prototxt", batch=1024, bandwidth="56Gbit/s"),
        "GoogLeNet": analyze(DATA / "bvlc_googlenet_with_aux_deploy.prototxt", batch=1024,
                             bandwidth="56Gbit/s"),
    }


def test_googlenet_with_aux_is_golden_deploy_plus_aux(golden, firecaffe_nets):
    """The data file is the golden BVLC deploy net with the two auxiliary classifiers."""
    deploy = (golden / "forward" / "bvlc_googlenet" / "deploy_used.prototxt").read_text()
    joined = analyze(deploy + "\n" + (DATA / "googlenet_aux_classifiers.prototxt").read_text(),
                     batch=1024)
    net = firecaffe_nets["GoogLeNet"]
    assert net.weights == joined.weights == 13_378_280
    assert net.flops == joined.flops
    assert [layer.name for layer in net.layers] == [layer.name for layer in joined.layers]
    assert net.weight_bytes / MB == pytest.approx(53.51312)
    assert firecaffe_nets["NiN"].weights == 7_595_176


def test_docs_scaling_tables(firecaffe_nets):
    """K20X at its 3.935 TFLOP/s peak, 56 Gbit/s, batch 1024: docs/scaling.md's tables."""
    nin = scaling(firecaffe_nets["NiN"], device_flops="3.935T")
    googlenet = scaling(firecaffe_nets["GoogLeNet"], device_flops="3.935T")
    # Per sample, forward + backward: NiN 6.601 GFLOP, GoogLeNet (with aux heads) 9.546 GFLOP.
    assert nin.flops / 1024 == pytest.approx(6.6011e9, rel=1e-4)
    assert googlenet.flops / 1024 == pytest.approx(9.5463e9, rel=1e-4)
    assert nin.row(1).compute_s == pytest.approx(1.7178, rel=1e-4)
    assert nin.row(128).compute_s == pytest.approx(nin.row(1).compute_s / 128)
    # 2|W|log2(128)/beta with |W| = 30.38 MB and beta = 7 GB/s: 60.8 ms.
    assert nin.row(128).communication_s["reduction_tree"] == pytest.approx(
        2 * 30_380_704 * 7 / 7e9)
    speedups = {name: {p: {k: round(v, 1) for k, v in t.row(p).speedup.items()}
                       for p in (16, 128)}
                for name, t in (("NiN", nin), ("GoogLeNet", googlenet))}
    assert speedups == {
        "NiN": {16: {"parameter_server": 7.0, "reduction_tree": 12.1, "ring_allreduce": 14.9},
                128: {"parameter_server": 1.5, "reduction_tree": 23.2, "ring_allreduce": 78.0}},
        "GoogLeNet": {
            16: {"parameter_server": 6.2, "reduction_tree": 11.5, "ring_allreduce": 14.6},
            128: {"parameter_server": 1.3, "reduction_tree": 19.6, "ring_allreduce": 71.8}},
    }
    # 21% of the peak (Paleo's calibration of FireCaffe's NiN runs): the tree's 128-worker
    # speed-up brackets FireCaffe's measured 39x (NiN) and 47x (GoogLeNet) from above.
    slow_nin = scaling(firecaffe_nets["NiN"], 128, device_flops=0.21 * 3.935e12)
    slow_googlenet = scaling(firecaffe_nets["GoogLeNet"], 128, device_flops=0.21 * 3.935e12)
    assert round(slow_nin.row(128).speedup["reduction_tree"], 1) == 65.6
    assert round(slow_googlenet.row(128).speedup["reduction_tree"], 1) == 59.3


# -- bad arguments --------------------------------------------------------------------------------


@pytest.mark.parametrize("value, message", [
    ("1,x", "analyze: `workers` '1,x' is not a worker count or a comma-separated list of them "
            "(such as '8' or '1,2,4,8')"),
    ("", "analyze: `workers` '' is not a worker count or a comma-separated list of them "
         "(such as '8' or '1,2,4,8')"),
    ("-2", "analyze: `workers` '-2' is not a worker count or a comma-separated list of them "
           "(such as '8' or '1,2,4,8')"),
    ("0,2", "analyze: `workers` must be positive, got 0 in '0,2'"),
    (0, "analyze: `workers` must be positive, got 0 in 0"),
    ([1, 2, 2], "analyze: `workers` lists a count twice: [1, 2, 2]"),
    ("4,4", "analyze: `workers` lists a count twice: '4,4'"),
    ([], "analyze: `workers` is an empty list"),
    ([1, 2.5], "analyze: `workers` must hold integers, got 2.5 in [1, 2.5]"),
    ([1, True], "analyze: `workers` must hold integers, got True in [1, True]"),
    (True, "analyze: `workers` must be a positive integer, a list of them or a string like "
           "'1,2,4', got True"),
    (2.0, "analyze: `workers` must be a positive integer, a list of them or a string like "
          "'1,2,4', got 2.0"),
])
def test_bad_workers(value, message):
    with pytest.raises(ArgumentError) as err:
        parse_workers(value)
    assert str(err.value) == message
    assert err.value.argument == "workers"


def test_workers_are_sorted():
    assert parse_workers("8, 1,2") == (1, 2, 8)
    assert parse_workers(range(1, 4)) == (1, 2, 3)
    assert parse_workers(5) == (5,)


def test_parse_flops():
    cases = {"6.1T": 6.1e12, "3.935 TFLOP/s": 3.935e12, "850 GFLOPS": 850e9, "1e12": 1e12,
             "2 PFLOP/s": 2e15, "100 kflops": 1e5, "5M": 5e6, 5e11: 5e11, 72: 72.0}
    for text, rate in cases.items():
        assert parse_flops(text) == pytest.approx(rate), text


@pytest.mark.parametrize("value, message", [
    ("fast", "analyze: `device_flops` 'fast' is not a FLOP rate: give FLOP/s, or a number with a "
             "prefix such as '6.1T', '3.9 TFLOP/s' or '850 GFLOPS'"),
    ("6.1 X", "analyze: `device_flops` '6.1 X' is not a FLOP rate: give FLOP/s, or a number "
              "with a prefix such as '6.1T', '3.9 TFLOP/s' or '850 GFLOPS'"),
    ("0T", "analyze: `device_flops` must be positive and finite, got '0T'"),
    (-1.0, "analyze: `device_flops` must be positive and finite, got -1.0"),
    (float("inf"), "analyze: `device_flops` must be positive and finite, got inf"),
    (True, "analyze: `device_flops` must be a number or a string, got True"),
    ([1], "analyze: `device_flops` must be a number (FLOP/s) or a string, got list"),
])
def test_bad_device_flops(value, message):
    with pytest.raises(ArgumentError) as err:
        parse_flops(value)
    assert str(err.value) == message
    assert err.value.argument == "device_flops"


def test_bad_scaling_arguments(tiny, tmp_path):
    cases = [
        (dict(workers=[1, 12], device_flops=72), "workers",
         "analyze: `workers` 12 workers exceed the batch of 6: a worker would get no sample"),
        (dict(workers=[1, 2]), "device_flops",
         "analyze: `device_flops` is needed for the predicted step time: give one worker's "
         "sustained FLOP/s, such as '6.1T'"),
        (dict(workers=2, device_flops=72, overlap="yes"), "overlap",
         "analyze: `overlap` must be True or False, got 'yes'"),
        (dict(workers=2, device_flops=72, bandwidth="soon"), "bandwidth", None),
    ]
    for kwargs, argument, message in cases:
        with pytest.raises(ArgumentError) as err:
            scaling(tiny, **kwargs)
        assert err.value.argument == argument, kwargs
        if message is not None:
            assert str(err.value) == message
    net = tmp_path / "tiny.prototxt"
    net.write_text(TINY)
    with pytest.raises(ArgumentError) as err:
        analyze_scaling(str(net), "1,2", None, batch=6)
    assert str(err.value) == ("analyze: `device_flops` is needed for a list of worker counts: "
                              "give one worker's sustained FLOP/s, such as '6.1T'")
    with pytest.raises(ArgumentError) as err:
        analyze_scaling(str(net), "1,2,x", "1T", batch=6)
    assert err.value.argument == "workers"
