"""``python -m keras_caffe.cli``: the ``keras-caffe`` command line (as ``python -m keras_caffe``)."""

import sys

from keras_caffe.cli import main

sys.exit(main())
