"""keras-caffe layers: deconv."""
