"""``keras-caffe install-horovod``: Horovod 0.28.1 built against this TensorFlow."""

from keras_caffe.cli._registry import command


def _arguments(parser):
    parser.add_argument("--dry-run", action="store_true",
                        help="print the plan (TensorFlow, patches, environment, GPU) and stop")
    parser.add_argument("--sdist", metavar="PATH",
                        help="a local horovod-0.28.1.tar.gz instead of downloading it")
    parser.add_argument("--gpu", choices=["auto", "nccl", "none"], default="auto",
                        help="auto (default): NCCL when TensorFlow is a CUDA build and nvcc and "
                             "nccl.h are found; nccl: require it; none: Gloo only")
    parser.add_argument("--jobs", "-j", type=int,
                        help="parallel compile jobs (default: the CPUs)")
    parser.add_argument("--any-tensorflow", action="store_true",
                        help="build even for a TensorFlow outside 2.16-2.21 (untested)")
    parser.add_argument("--keep-build-dir", action="store_true",
                        help="keep the temporary build directory (always kept on failure)")
    parser.add_argument("--verbose", action="store_true",
                        help="show the build's output (CMake's, the compiler's) instead of "
                             "the progress line; it is always in the build log")
    parser.add_argument("--no-cache", action="store_true",
                        help="build from source even when a cached build matches (the new "
                             "build is cached all the same)")
    parser.add_argument("--cache-dir", metavar="DIR",
                        help="keep verified builds in DIR/horovod/<key>/ (default: "
                             "$KERAS_CAFFE_CACHE, else ~/.cache/keras-caffe)")


@command("install-horovod", help="build Horovod 0.28.1 (Gloo) against the installed TensorFlow",
         description="Download Horovod 0.28.1's sdist, check its sha256, apply keras-caffe's "
                     "patches and build it into this Python against the TensorFlow installed "
                     "here (2.16 to 2.21), with Gloo (and NCCL when TensorFlow, a CUDA "
                     "toolkit and nccl.h are there). TensorFlow is never reinstalled. A "
                     "verified build is cached under a key of all that shapes the binary "
                     "(TensorFlow, compiler, Python, patches, flags) and reused, after the "
                     "same check, when they all match.",
         arguments=_arguments, tensorflow_only=True)
def run(args):
    # here, not at the top: the build's modules would add to `keras-caffe --help`'s start-up
    from keras_caffe import horovod_build

    return horovod_build.main(args)
