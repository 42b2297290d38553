"""The recurrent forks' ContinuationIndicator against a numpy port of its
``Forward_cpu`` (src/caffe/layers/continuation_indicator_layer.cpp of the
CRNN/LRCN Caffe ports: dlunion/CC4.0, intel/caffe), with N from
``batch_size`` (no bottom) or the bottom's ``num()`` (CC4.0's one-bottom form)."""

import re

import keras
import numpy as np
import pytest

from keras_caffe.errors import LayerError
from keras_caffe.importers import import_model
from keras_caffe.analysis import analyze
from support import DATA_FORMATS, run_layers, to_keras_layout

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)


def indicator_reference(time_step, batch):
    """ContinuationIndicatorLayer::Forward_cpu: for t, then b, write 0 when
    t == 0 and 1 otherwise."""
    top = np.empty((time_step, batch), np.float32)
    for t in range(time_step):
        for b in range(batch):
            top[t, b] = 0 if t == 0 else 1
    return top


def layer(params, bottom=True):
    return ('layer { name: "ind" type: "ContinuationIndicator" '
            + ('bottom: "data" ' if bottom else "")
            + f'top: "cont" continuation_indicator_param {{ {params} }} }}\n')


@pytest.mark.layer_type("ContinuationIndicator")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("time_step, shape", [(5, (3, 2, 4, 4)), (1, (2, 7)), (3, (1, 6, 2))])
def test_with_a_bottom_n_is_its_first_axis(data_format, time_step, shape):
    """CC4.0: ``mini_batch_ = bottom[0]->num()``; batch_size is not read."""
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    got = run_layers(layer(f"time_step: {time_step} batch_size: 99"), {"data": x},
                     data_format=data_format)["cont"]
    np.testing.assert_array_equal(got, indicator_reference(time_step, shape[0]))


@pytest.mark.layer_type("ContinuationIndicator")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("time_step, batch", [(4, 2), (1, 3)])
def test_without_a_bottom_it_feeds_an_lstm(data_format, time_step, batch):
    """The bottomless form (N = batch_size) as an LSTM's cont: the LSTM's
    output is the one it gives with the same blob fed as an input."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((time_step, batch, 3)).astype(np.float32)
    lstm = ('layer { name: "lstm" type: "LSTM" bottom: "x" bottom: "cont" top: "h" '
            'recurrent_param { num_output: 2 weight_filler { type: "gaussian" std: 1 } '
            'bias_filler { type: "gaussian" std: 1 } } }\n')
    text = ('layer { name: "in" type: "Input" top: "x" input_param { shape { dim: '
            f'{time_step} dim: {batch} dim: 3 }} }} }}\n'
            + layer(f"time_step: {time_step} batch_size: {batch}", bottom=False) + lstm)
    model = import_model(text, data_format=data_format, outputs=["h"])
    got = keras.ops.convert_to_numpy(model(to_keras_layout(x, data_format)))
    if data_format == "channels_last":
        got = np.moveaxis(got, -1, 1)
    blobs = [keras.ops.convert_to_numpy(v) for v in model.get_layer("lstm").caffe_variables()]
    fed = run_layers(lstm, {"x": x, "cont": indicator_reference(time_step, batch)},
                     {"lstm": blobs}, data_format)["h"]
    np.testing.assert_allclose(got, fed, rtol=1e-6, atol=1e-6)
    row = {r.name: r for r in analyze(text, batch=None).layers}["ind"]
    assert row.tops == (("cont", (time_step, batch)),)
    assert row.weight_shapes == ()


@pytest.mark.layer_type("ContinuationIndicator")
def test_analyze_sizes_both_forms():
    text = ('layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 3 dim: 5 '
            '} } }\n' + layer("time_step: 7"))
    assert analyze(text, batch=None).layers[-1].tops == (("cont", (7, 3)),)
    bare = ('layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 3 dim: 5 '
            '} } }\n' + layer("time_step: 2 batch_size: 4", bottom=False))
    assert analyze(bare, batch=None).layers[-1].tops == (("cont", (2, 4)),)


def _bad(text, message):
    with pytest.raises(LayerError, match=re.escape(message)):
        import_model(text, data_format="channels_first")
    with pytest.raises(LayerError, match=re.escape(message)):
        analyze(text, batch=None)


@pytest.mark.layer_type("ContinuationIndicator")
def test_bad_parameters_name_the_layer():
    data = ('layer { name: "in" type: "Input" top: "data" top: "more" input_param { '
            'shape { dim: 3 dim: 5 } } }\n')
    _bad(data + layer("batch_size: 2"),
         "layer 'ind': (ContinuationIndicator) continuation_indicator_param.time_step must be "
         "positive, got 0")
    _bad(data + layer("time_step: 3", bottom=False),
         "layer 'ind': (ContinuationIndicator) without a bottom needs a positive "
         "continuation_indicator_param.batch_size, got 0")
    _bad(data + layer("time_step: 3").replace('top: "cont"', 'bottom: "more" top: "cont"'),
         "layer 'ind': (ContinuationIndicator) takes 0 to 1 bottom(s), got 2")
