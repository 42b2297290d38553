"""``keras-caffe time``: forward and backward time per layer, as ``caffe time``."""

from keras_caffe._cli_quiet import hide_xla_start
from keras_caffe.cli._registry import (command, data_format_argument, input_shape_argument,
                                       input_shapes, jit, pooling_rule_argument, usage)


def _check(args):
    if args.iterations < 1:
        raise usage(f"--iterations must be >= 1, got {args.iterations}")
    input_shapes(args.input_shape)


def _arguments(parser):
    parser.add_argument("--model", "-model", required=True, help="the .prototxt")
    parser.add_argument("--iterations", "-iterations", type=int, default=50)
    parser.add_argument("--phase", "-phase", default="TRAIN", choices=["TRAIN", "TEST"])
    parser.add_argument("--log", choices=["table", "caffe"], default="table",
                        help="a table (default), or Caffe's log lines on stderr")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    data_format_argument(parser)
    input_shape_argument(parser)
    pooling_rule_argument(parser)
    parser.add_argument("--jit", choices=["auto", "on", "off"], default="auto")


@command("time", help="time a net's forward and backward passes, per layer (like `caffe time`)",
         description="The average (over --iterations) forward and backward time of every layer "
                     "of the net, data and loss layers included, under Caffe's layer names, as "
                     "`caffe time` measures them: each layer called in turn, each pass timed "
                     "as a whole. The layers and the remainder (the framework between the "
                     "calls) add up to the measured passes; the total time is measured too. "
                     "Also: the net as one compiled function, as training runs it.",
         arguments=_arguments, inputs=("model",), check=_check, tensorflow_only=True)
def run(args):
    # here, not at the top: keeps `keras-caffe --help` start-up free of TensorFlow
    from keras_caffe.training.timing import print_timing, time_net

    hide_xla_start()
    report = time_net(args.model, iterations=args.iterations, phase=args.phase,
                      data_format=args.data_format, jit_compile=jit(args.jit),
                      input_shapes=input_shapes(args.input_shape))
    if args.json:
        import json

        print(json.dumps(report.to_dict(), indent=2))
        return 0
    print_timing(report, style=args.log)
    return 0
