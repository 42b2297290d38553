"""``keras-caffe time``: forward and backward time per layer, as ``caffe time``."""

from keras_caffe.cli._registry import command, data_format_argument, jit, usage


def _arguments(parser):
    parser.add_argument("--model", "-model", required=True, help="the .prototxt")
    parser.add_argument("--iterations", "-iterations", type=int, default=50)
    parser.add_argument("--phase", "-phase", default="TRAIN", choices=["TRAIN", "TEST"])
    parser.add_argument("--log", choices=["table", "caffe"], default="table",
                        help="a table (default), or Caffe's log lines on stderr")
    data_format_argument(parser)
    parser.add_argument("--jit", choices=["auto", "on", "off"], default="auto")


@command("time", help="time a net's forward and backward passes, per layer (like `caffe time`)",
         description="Average forward, backward and forward-backward time per layer and in "
                     "total over --iterations batches, in the TRAIN phase as `caffe time`.",
         arguments=_arguments)
def run(args):
    from keras_caffe.timing import print_timing, time_net

    if args.iterations < 1:
        raise usage(f"--iterations must be >= 1, got {args.iterations}")
    report = time_net(args.model, iterations=args.iterations, phase=args.phase,
                      data_format=args.data_format, jit_compile=jit(args.jit))
    print_timing(report, style=args.log)
    return 0
