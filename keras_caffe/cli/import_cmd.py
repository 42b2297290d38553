"""``keras-caffe import``: a Caffe net (and weights) as a Keras model."""

from keras_caffe.cli._registry import (command, data_format_argument, input_shape_argument,
                                       input_shapes, pooling_rule_argument, usage)


def _check(args):
    if args.list_layers:
        return
    if not args.net:
        raise usage("import needs a net (.prototxt), or --list-layers")
    if args.output and not args.output.endswith(".keras"):
        raise usage(f"-o {args.output}: the output must be a .keras file")
    input_shapes(args.input_shape)


def _arguments(parser):
    parser.add_argument("net", nargs="?", help="the .prototxt (deploy or train_val)")
    parser.add_argument("--weights", help=".caffemodel or .caffemodel.h5")
    parser.add_argument("-o", "--output", help="save the model here (a .keras file)")
    parser.add_argument("--phase", default="TEST", choices=["TEST", "TRAIN"])
    data_format_argument(parser)
    input_shape_argument(parser)
    pooling_rule_argument(parser)
    parser.add_argument("--summary", action="store_true", help="only print the layer table")
    parser.add_argument("--json", action="store_true",
                        help="print the layer table as JSON (with -o: and save)")
    parser.add_argument("--list-layers", action="store_true",
                        help="print the supported layer types and where each comes from "
                             "(BVLC Caffe or a fork)")


@command("import", help="Caffe prototxt (+ caffemodel) -> a Keras model",
         description="Import a Caffe net; print its layers; optionally save it.",
         arguments=_arguments, inputs=("net", "weights"), check=_check)
def run(args):
    if args.list_layers:
        return _list_layers()
    # here, not at the top: keeps `keras-caffe --help` start-up free of Keras and its backend
    from keras_caffe.importers.net.importing import import_net

    imported = import_net(args.net, args.weights, phase=args.phase, data_format=args.data_format,
                          input_shapes=input_shapes(args.input_shape))
    rows = layer_rows(imported)
    saved = bool(args.output and not args.summary)
    if saved:
        save_atomically(imported.model, args.output)
    if args.json:
        import json

        print(json.dumps({"net": imported.net.name or str(imported.source),
                          "layers": rows, "params": sum(r["params"] for r in rows),
                          "saved": args.output if saved else None}, indent=2))
        return 0
    # here, not at the top: keeps `keras-caffe --help` start-up free of Keras and its backend
    from keras_caffe.analysis.tables import print_grid

    print_grid(_grid(imported, rows))
    if saved:
        print(f"saved {args.output}")
    return 0


def _list_layers():
    # here, not at the top: keeps `keras-caffe --help` start-up free of Keras and its backend
    from keras_caffe.importers import registered_types
    from keras_caffe.importers.net.registry import origin  # start-up, as above

    types = registered_types()
    width = max(map(len, types)) + 2
    # Plain lines (never cut): the type, then where it comes from.
    for layer_type in types:
        print(f"{layer_type:<{width}}{origin(layer_type)}")
    return 0


def layer_rows(imported):
    """``importers.layer_summary`` as dicts for ``--json``: name, type, tops,
    output shapes (N, C, H, W; None for a loss or metric) and parameter count."""
    # here, not at the top: keeps `keras-caffe --help` start-up free of Keras and its backend
    from keras_caffe.importers import layer_summary

    rows = []
    for layer, row in zip(imported.net.layer, layer_summary(imported)):
        rows.append({"name": row.name, "type": row.type,
                     "tops": [top for top in layer.top if top in imported.blobs],
                     "shapes": [None if shape is None else
                                [None if d is None else int(d) for d in shape]
                                for shape in row.shapes],
                     "params": row.params})
    return rows


def _grid(imported, rows):
    # here, not at the top: keeps `keras-caffe --help` start-up free of Keras and its backend
    from keras_caffe.analysis.tables import Column, Grid

    grid = Grid(f"{imported.net.name or imported.source}",
                [Column("layer"), Column("type"), Column("output shape (N, C, H, W)"),
                 Column("params", True)])
    for row in rows:
        grid.add_row(row["name"], row["type"], ", ".join(map(_shape_text, row["shapes"])),
                     f"{row['params']:,}" if row["params"] else "")
    grid.add_row("total", "", "", f"{sum(r['params'] for r in rows):,}", rule=True)
    return grid


def layer_table(imported):
    """A rich table of the Caffe layers: name, type, output shape(s), params."""
    # here, not at the top: keeps `keras-caffe --help` start-up free of Keras and its backend
    from keras_caffe.analysis.tables import to_rich

    return to_rich(_grid(imported, layer_rows(imported)))


def _shape_text(shape):
    if shape is None:
        return "loss"
    cells = ["N" if d is None else str(d) for d in shape]
    return "(" + ", ".join(cells) + ("," if len(cells) == 1 else "") + ")"


def save_atomically(model, path):
    """``model.save`` through ``keras_caffe.importers.formats.atomic`` (no partial
    file, the user's path in errors, the mode ``open()`` gives), the .keras
    carrying the model's Caffe net (``keras_caffe.importers.net.keras_file``)."""
    # here, not at the top: keeps `keras-caffe --help` start-up free of Keras and its backend
    from keras_caffe.importers.net.keras_file import save_keras

    save_keras(model, path)
