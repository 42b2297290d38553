"""keras-caffe layers: shape."""
