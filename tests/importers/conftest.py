def pytest_configure(config):
    config.addinivalue_line(
        "markers", "converter(type): the test checks the converter of this Caffe layer type"
    )
