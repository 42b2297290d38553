"""The import-time memory budget (``importers/net/memory_budget.py``): nets that
ask for more than the process may allocate are refused with a ``LayerError``
naming the layer and the bytes, before TensorFlow allocates anything (issue
18's reproducers, which ended in ``ResourceExhaustedError ... OOM``).

Each case runs in a fresh process whose ``RLIMIT_DATA`` is 3 GiB, the limit
the budget then reads (the smallest of RAM, the cgroup limit and the
rlimits), so the numbers in the messages are the machine's, not a mock's.
"""

import json
import os
import subprocess
import sys
import tempfile

import keras
import pytest

SCRIPT = r"""
import json, resource, sys
limit = 3 * 2 ** 30
resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
import keras_caffe
out = {}
for name, net in json.loads(sys.argv[1]).items():
    try:
        keras_caffe.import_model(net, phase="TEST")
        out[name] = "imported"
    except Exception as err:  # the test checks the type
        out[name] = f"{type(err).__name__}: {err}"
print("RESULT " + json.dumps(out))
"""


def _input(*dims):
    shape = " ".join(f"dim: {d}" for d in dims)
    return f'layer {{ name: "data" type: "Input" top: "data" input_param {{ shape {{ {shape} }} }} }}\n'


NETS = {
    "ip_30000x30000": _input(1, 30000) + 'layer { name: "ip" type: "InnerProduct" bottom: "data" '
                      'top: "ip" inner_product_param { num_output: 30000 } }',
    "num_output_1e9": _input(1, 1) + 'layer { name: "wide" type: "InnerProduct" bottom: "data" '
                      'top: "wide" inner_product_param { num_output: 1000000000 } }',
    "embed_1e9": _input(1, 1) + 'layer { name: "embed" type: "Embed" bottom: "data" top: "e" '
                 'embed_param { input_dim: 1000000000 num_output: 1 } }',
    "dummy_batch_1e9": 'layer { name: "dummy" type: "DummyData" top: "d" dummy_data_param { '
                       'shape { dim: 1000000000 dim: 1 } } }',
    "dummy_1x1e9": 'layer { name: "dummy" type: "DummyData" top: "d" dummy_data_param { '
                   'shape { dim: 1 dim: 1000000000 } } }',
    "squeezenet_mutated": _input(1, 1000, 64, 64) + 'layer { name: "fire9/expand3x3" '
                          'type: "Convolution" bottom: "data" top: "c" convolution_param { '
                          'num_output: 1000 kernel_h: 16 kernel_w: 64 } }',
    "small": _input(2, 3, 8, 8) + 'layer { name: "conv" type: "Convolution" bottom: "data" '
             'top: "c" convolution_param { num_output: 4 kernel_size: 3 } }',
}

EXPECTED = {
    "ip_30000x30000": r"LayerError: layer 'ip': \(InnerProduct\) its weights \(3.35 GiB\) bring "
                      r"the net's weights to 3.35 GiB, more than the 3.00 GiB of RLIMIT_DATA",
    "num_output_1e9": r"LayerError: layer 'wide': \(InnerProduct\) its weights \(7.45 GiB\)",
    "embed_1e9": r"LayerError: layer 'embed': \(Embed\) its weights \(3.73 GiB\)",
    "dummy_batch_1e9": r"LayerError: layer 'dummy': \(DummyData\) needs 3.73 GiB at once \(inputs "
                       r"and outputs for the batch, and weights\), more than the 3.00 GiB of "
                       r"RLIMIT_DATA; no LMS plan can split one layer",
    "dummy_1x1e9": r"LayerError: layer 'dummy': \(DummyData\) needs 3.73 GiB at once",
    "squeezenet_mutated": r"LayerError: layer 'fire9/expand3x3': \(Convolution\) its weights "
                          r"\(3.81 GiB\)",
    "small": r"imported",
}
#: DummyData's shapes are its tf.data layer's (importers/layer_types/_tensorflow_data.py):
#: on JAX and PyTorch, refused by name before anything is allocated.
if keras.backend.backend() != "tensorflow":
    EXPECTED.update({case: r"TensorFlowRequirementError: layer 'dummy' \(DummyData\) finds its "
                           r"tops' shapes through keras_caffe.importers.data \(tf.data\)"
                     for case in ("dummy_batch_1e9", "dummy_1x1e9")})


@pytest.fixture(scope="module")
def results():
    run = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(NETS)], capture_output=True,
                         text=True, timeout=600, cwd=tempfile.gettempdir(),
                         env={"TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "",
                              "PATH": "/usr/bin:/bin", **_pythonpath()})
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"exit {run.returncode}:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def _pythonpath():
    """The test's Python path and home, and its Keras backend."""
    return {"KERAS_BACKEND": keras.backend.backend(),
            **{k: os.environ[k] for k in ("PYTHONPATH", "HOME") if k in os.environ}}


@pytest.mark.parametrize("case", sorted(NETS))
def test_refused_before_allocating(results, case):
    import re

    assert re.match(EXPECTED[case], results[case]), results[case]
