"""``python -m keras_caffe``: the ``keras-caffe`` command line."""

import sys

from keras_caffe.cli import main

sys.exit(main())
