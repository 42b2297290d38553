"""keras-caffe layers: elementwise."""
