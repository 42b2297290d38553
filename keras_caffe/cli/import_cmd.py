"""``keras-caffe import``: a Caffe net (and weights) as a Keras model."""

from keras_caffe.cli._registry import command, data_format_argument, usage


def _arguments(parser):
    parser.add_argument("net", nargs="?", help="the .prototxt (deploy or train_val)")
    parser.add_argument("--weights", help=".caffemodel or .caffemodel.h5")
    parser.add_argument("-o", "--output", help="save the model here (a .keras file)")
    parser.add_argument("--phase", default="TEST", choices=["TEST", "TRAIN"])
    data_format_argument(parser)
    parser.add_argument("--summary", action="store_true", help="only print the layer table")
    parser.add_argument("--list-layers", action="store_true",
                        help="print the supported layer types and where each comes from "
                             "(BVLC Caffe or a fork)")


@command("import", help="Caffe prototxt (+ caffemodel) -> a Keras model",
         description="Import a Caffe net; print its layers; optionally save it.",
         arguments=_arguments)
def run(args):
    from rich.console import Console

    console = Console()
    if args.list_layers:
        return _list_layers()
    if not args.net:
        raise usage("import needs a net (.prototxt), or --list-layers")
    if args.output and not args.output.endswith(".keras"):
        raise usage(f"-o {args.output}: the output must be a .keras file")
    from keras_caffe.importers.api import import_net

    imported = import_net(args.net, args.weights, phase=args.phase, data_format=args.data_format)
    console.print(layer_table(imported))
    if args.output and not args.summary:
        save_atomically(imported.model, args.output)
        console.print(f"saved {args.output}", highlight=False)
    return 0


def _list_layers():
    from keras_caffe.importers import registered_types
    from keras_caffe.importers.registry import origin

    types = registered_types()
    width = max(map(len, types)) + 2
    # Plain lines (never cut): the type, then where it comes from.
    for layer_type in types:
        print(f"{layer_type:<{width}}{origin(layer_type)}")
    return 0


def layer_table(imported):
    """A rich table of the Caffe layers: name, type, output shape(s), params."""
    import numpy as np
    from rich.table import Table

    from keras_caffe.importers.api import caffe_parts
    from keras_caffe.importers.graph import Context

    counts = {name: sum(int(np.prod(w.shape)) for w in layer.caffe_variables()[start:start + count])
              for name, (layer, start, count, _) in caffe_parts(imported.model).items()}
    ctx = Context(None, None, imported.source)
    table = Table(title=f"{imported.net.name or imported.source}")
    for column, justify in (("layer", "left"), ("type", "left"),
                            ("output shape (N, C, H, W)", "left"), ("params", "right")):
        table.add_column(column, justify=justify)
    total = 0
    for layer in imported.net.layer:
        shapes = ", ".join(_shape_text(ctx, imported.blobs[top])
                           for top in layer.top if top in imported.blobs)
        params = counts.get(layer.name, 0)
        total += params
        table.add_row(layer.name, layer.type, shapes, f"{params:,}" if params else "")
    table.add_section()
    table.add_row("total", "", "", f"{total:,}")
    return table


def _shape_text(ctx, blob):
    if blob.tensor is None:
        return "loss"  # a loss or metric: computed by the training loop
    return str(tuple(d if d is not None else "N" for d in ctx.caffe_shape(blob))).replace("'", "")


def save_atomically(model, path):
    """``model.save`` through ``keras_caffe.importers.atomic`` (no partial
    file, the user's path in errors, the mode ``open()`` gives), the .keras
    carrying the model's Caffe net (``keras_caffe.importers.keras_file``)."""
    from keras_caffe.importers.keras_file import save_keras

    save_keras(model, path)
