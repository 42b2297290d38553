def pytest_configure(config):
    config.addinivalue_line(
        "markers", "layer_type(type): the test checks the unit of this Caffe layer type"
    )
