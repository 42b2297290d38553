"""``keras-caffe test``: score a trained net, as ``caffe test``.

Caffe's ``test`` (tools/caffe.cpp ``test()``) builds the TEST-phase net,
copies the weights in, runs ``iterations`` forward passes over the data
layers' batches and logs each batch's net outputs (``Batch k, accuracy =
0.98``), then the average loss (``Loss: x``, the weighted sum of the loss
layers) and each output averaged over the batches, a loss with its weight
(``loss = 0.05 (* 1 = 0.05 loss)``). Numbers are written as C++'s ostream
writes a float (``%g``, 6 digits).
"""

from keras_caffe._cli_quiet import hide_xla_start
from keras_caffe.cli._registry import (command, data_format_argument, input_shape_argument,
                                       input_shapes, jit, pooling_rule_argument, usage)


def _check(args):
    if args.iterations < 1:
        raise usage(f"--iterations must be >= 1, got {args.iterations}")
    input_shapes(args.input_shape)


def _arguments(parser):
    parser.add_argument("--model", "-model", required=True,
                        help="the .prototxt (train_val: its TEST phase)")
    parser.add_argument("--weights", "-weights", required=True,
                        help=".caffemodel or .caffemodel.h5")
    parser.add_argument("--iterations", "-iterations", type=int, default=50,
                        help="batches to score (Caffe's default: 50)")
    parser.add_argument("--phase", "-phase", default="TEST", choices=["TEST", "TRAIN"])
    parser.add_argument("--log", choices=["plain", "caffe"], default="plain",
                        help="plain lines on stdout (default), or Caffe's log lines on stderr")
    parser.add_argument("--json", action="store_true", help="print JSON instead")
    data_format_argument(parser)
    input_shape_argument(parser)
    pooling_rule_argument(parser)
    parser.add_argument("--jit", choices=["auto", "on", "off"], default="auto")


@command("test", help="score a trained net over N batches (like `caffe test`)",
         description="Run the TEST phase of a net with its weights for --iterations batches of "
                     "its data layers; print each batch's outputs (losses, accuracies), the "
                     "average loss and each output averaged over the batches, as `caffe test`.",
         arguments=_arguments, inputs=("model", "weights"), check=_check, tensorflow_only=True)
def run(args):
    # here, not at the top: keeps `keras-caffe --help` start-up free of TensorFlow
    from keras_caffe.training.scoring import score_net

    hide_xla_start()
    scores = score_net(args.model, args.weights, iterations=args.iterations, phase=args.phase,
                       data_format=args.data_format, jit_compile=jit(args.jit),
                       input_shapes=input_shapes(args.input_shape))
    if args.json:
        import json

        print(json.dumps(scores.to_dict(), indent=2))
        return 0
    _print(scores, args.log)
    return 0


def _print(scores, style):
    # here, not at the top: caffe_log imports numpy, which would slow `--help`'s start-up
    from keras_caffe.caffe_log import CaffeLog, number

    if style == "caffe":
        log = CaffeLog()

        def say(line, message):
            log.line(line, message)
    else:
        def say(line, message):
            print(message)
    for k, values in enumerate(scores.batches):
        for name, value in zip(scores.names, values):
            say("caffe.cpp:304", f"Batch {k}, {name} = {number(value)}")
    say("caffe.cpp:309", f"Loss: {number(scores.loss)}")
    for name, weight, mean in zip(scores.names, scores.weights, scores.means):
        suffix = f" (* {number(weight)} = {number(weight * mean)} loss)" if weight else ""
        say("caffe.cpp:321", f"{name} = {number(mean)}{suffix}")
