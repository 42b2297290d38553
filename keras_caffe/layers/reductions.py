"""keras-caffe layers: reductions."""
