"""``keras-caffe export``: a .keras model made by keras-caffe -> Caffe weights."""

from keras_caffe.cli._registry import command, usage

_SUFFIXES = (".caffemodel", ".caffemodel.h5")


def _check(args):
    if not args.output.endswith(_SUFFIXES):
        raise usage(f"-o {args.output}: the output must end in .caffemodel or .caffemodel.h5")
    if args.prototxt and not args.prototxt.endswith(".prototxt"):
        raise usage(f"--prototxt {args.prototxt}: the output must be a .prototxt file")


def _arguments(parser):
    parser.add_argument("model", help="a .keras file written by `keras-caffe import -o` "
                                      "(or model.save of a keras_caffe.import_model model)")
    parser.add_argument("-o", "--output", required=True,
                        help="the weights file: .caffemodel (binary) or .caffemodel.h5 (HDF5)")
    parser.add_argument("--prototxt", help="also write the model's Caffe net here (filtered "
                                           "and upgraded, as imported)")


@command("export", help="a keras-caffe .keras model -> .caffemodel (or .caffemodel.h5)",
         description="Write the weights of a .keras model made by keras-caffe as Caffe "
                     "weights, under its Caffe layer names and in Caffe's blob order; for a "
                     "model saved by `keras-caffe import -o`, the bytes Caffe writes for "
                     "its net (Net::ToProto / Net::ToHDF5).",
         arguments=_arguments, inputs=("model",), check=_check)
def run(args):
    # here, not at the top: keeps `keras-caffe --help` start-up free of Keras and its backend
    from keras_caffe.importers.net.export import export_caffemodel
    from keras_caffe.importers.net.keras_file import load_keras  # start-up, as above

    model, net = load_keras(args.model)
    if args.prototxt and net is None:
        raise usage(f"{args.model} does not carry its Caffe net (saved without it, e.g. by "
                    "model.save or an older keras-caffe): --prototxt needs it")
    export_caffemodel(model, args.output)
    print(f"saved {args.output}")
    if args.prototxt:
        from google.protobuf import text_format

        # only when --prototxt is given (start-up, as above)
        from keras_caffe.importers.formats.atomic import write_bytes_durably

        write_bytes_durably(args.prototxt, text_format.MessageToString(net).encode("utf-8"))
        print(f"saved {args.prototxt}")
    return 0
