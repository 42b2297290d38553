"""``keras-caffe analyze``: |W|, |D|, FLOPs and data-parallel communication."""

from keras_caffe.cli._registry import (command, input_shape_argument, input_shapes,
                                       pooling_rule_argument)


def _arguments(parser):
    parser.add_argument("net", help="the .prototxt")
    parser.add_argument("--batch", type=int, default=1, help="batch per step (all workers)")
    parser.add_argument("--workers", default="1",
                        help="data-parallel workers p, or a list (1,2,4,8) for a scaling table")
    parser.add_argument("--bandwidth", default="10Gbit/s",
                        help="per-link bandwidth: bytes/s or with a unit (10Gbit/s, 1.25GB/s)")
    parser.add_argument("--device-flops",
                        help="one worker's sustained FLOP/s (6.1T, 3.9e12): adds the predicted "
                             "step time and speed-up of each scheme at each p (needed for a list)")
    parser.add_argument("--overlap", action="store_true",
                        help="with --device-flops: step = max(compute, communication), not the sum")
    parser.add_argument("--phase", default="TEST", choices=["TEST", "TRAIN"])
    input_shape_argument(parser)
    pooling_rule_argument(parser)
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


@command("analyze", help="weights |W|, activations |D|, FLOPs, data-parallel communication time",
         description="Per layer and in total: weight and activation bytes (float32, FireCaffe's "
                     "|W| and |D|), forward+backward FLOPs per batch, and the communication time "
                     "per step of a parameter server, a reduction tree and a ring all-reduce.",
         arguments=_arguments, inputs=("net",))
def run(args):
    import json

    # here, not at the top: keeps `keras-caffe --help` start-up free of Keras and its backend
    from keras_caffe.analysis import analyze_scaling
    from keras_caffe.analysis.tables import print_grid  # start-up, as above

    report, scaling = analyze_scaling(args.net, args.workers, args.device_flops,
                                      batch=args.batch, bandwidth=args.bandwidth,
                                      phase=args.phase, overlap=args.overlap,
                                      input_shapes=input_shapes(args.input_shape))
    if args.json:
        data = report.to_dict()
        if scaling is not None:
            data["scaling"] = scaling.to_dict()
        print(json.dumps(data, indent=2))
        return 0
    print_grid(report.grid())
    print_grid(report.communication_grid())
    if scaling is not None:
        print_grid(scaling.grid())
    return 0
