"""The package's structure, read from its own imports (``ast``, nothing run).

``python tests/support/import_graph.py [REPO]`` prints the figures
docs/architecture.md quotes; ``tests/test_import_structure.py`` holds them
to the rules of the house:

- import cycles: strongly connected groups of modules, once over the
  imports a module runs when it is loaded (module level), once over every
  import, function-local ones included (a cycle a function-local import
  only hides);
- imports from the library into the command line (``keras_caffe.cli``);
- imports against the intended direction: a module of a lower layer
  (``LAYERS`` below) importing one of a higher layer;
- function-local imports of the project, and those without a comment on
  their line or the line above saying why they are local.

``--renames FILE`` reads a Markdown table ``| old module | new module |``
(docs/architecture.md's "Where modules moved") so a tree from before a move
is ranked by where its modules live now: the figures of two trees compare.
"""

import argparse
import ast
import re
import sys
from pathlib import Path

#: Source folders -> the package they install as (setup.cfg's package_dir).
ROOTS = {"keras_caffe": "keras_caffe", "importers": "keras_caffe.importers",
         "callbacks": "keras_caffe.callbacks"}

#: The intended direction, lowest first: a module may import its own layer
#: and those below it. The longest matching prefix decides.
LAYERS = (
    ("foundation", ("keras_caffe.errors", "keras_caffe.proto", "keras_caffe._checks",
                    "keras_caffe._floats", "keras_caffe._serializable",
                    "keras_caffe._require", "keras_caffe._cli_quiet", "keras_caffe.kernels",
                    "keras_caffe.devices", "keras_caffe.caffe_log", "keras_caffe.backends",
                    "keras_caffe.backend_devices",
                    "keras_caffe.distributed.context",
                    "keras_caffe.distributed._hvd")),
    ("Caffe's files", ("keras_caffe.importers.formats",)),
    ("Keras objects", ("keras_caffe.layers", "keras_caffe.initializers", "keras_caffe.losses",
                       "keras_caffe.schedules", "keras_caffe.optimizers")),
    ("nets, data, snapshots", ("keras_caffe.importers",)),
    ("LMS, analysis", ("keras_caffe.lms", "keras_caffe.analysis")),
    ("training", ("keras_caffe.training", "keras_caffe.distributed", "keras_caffe.data_parallel",
                  "keras_caffe.callbacks",
                  "keras_caffe.horovod_build")),
    ("public API", ("keras_caffe._api",)),
    ("command line", ("keras_caffe.cli", "keras_caffe.__main__")),
)
#: What a function-local import's comment says about why it is local.
REASON = re.compile(r"#.*\b(start-up|startup|TensorFlow|optional|Horovod|cycle|lazily|"
                    r"lazy|only when|only if|JAX|torch|backend)", re.IGNORECASE)


def modules(repo):
    """{module name: path} of the package's source files."""
    found = {}
    for folder, package in ROOTS.items():
        for path in sorted((Path(repo) / folder).rglob("*.py")):
            parts = path.relative_to(Path(repo) / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if "proto" in parts and parts[-1] == "caffe_pb2":
                continue  # generated
            found[".".join((package,) + parts)] = path
    return found


def _targets(node, module, known, is_package):
    """Project modules an import statement names."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if _project(alias.name, known)]
    base = node.module or ""
    if node.level:
        anchor = module.split(".")
        anchor = anchor[:len(anchor) - node.level + (1 if is_package else 0)]
        base = ".".join(anchor + ([base] if base else []))
    names = []
    for alias in node.names:
        full = f"{base}.{alias.name}"
        if full in known:
            names.append(full)
        elif _project(base, known):
            names.append(base)
    return names


def _project(name, known):
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def imports(repo):
    """[(importer, imported, local, lineno, has_reason)] over the package."""
    known = modules(repo)
    edges, seen = [], set()
    for module, path in known.items():
        text = path.read_text()
        lines = text.splitlines()
        tree = ast.parse(text)
        guarded = _type_checking_imports(tree)
        local = set()
        for function in ast.walk(tree):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                local.update(id(n) for n in ast.walk(function)
                             if isinstance(n, (ast.Import, ast.ImportFrom)))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            if id(node) in guarded:
                continue
            for target in _targets(node, module, known, path.name == "__init__.py"):
                target = _project(target, known)
                if target == module or (module, target, node.lineno) in seen:
                    continue
                seen.add((module, target, node.lineno))
                near = lines[max(node.lineno - 2, 0):node.end_lineno]
                reason = any(REASON.search(line) for line in near)
                edges.append((module, target, id(node) in local, node.lineno, reason))
    return known, edges


def _type_checking_imports(tree):
    """ids of the imports under ``if TYPE_CHECKING:`` (never run)."""
    return {id(child) for block in ast.walk(tree)
            if isinstance(block, ast.If) and isinstance(block.test, (ast.Name, ast.Attribute))
            and "TYPE_CHECKING" in ast.unparse(block.test)
            for child in ast.walk(block) if isinstance(child, (ast.Import, ast.ImportFrom))}


def cycles(nodes, edges):
    """Strongly connected groups of more than one module (Tarjan), sorted."""
    graph = {n: set() for n in nodes}
    for a, b in edges:
        graph[a].add(b)
    index, low, stack, on, groups, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(groups)


def layer_of(module):
    best = (-1, None)
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best[0]:
                best = (len(prefix), rank)
    if best[1] is None and module == "keras_caffe":  # the package root re-exports the public API
        return [name for name, _ in LAYERS].index("public API")
    return best[1]


def read_renames(path):
    """{old module: new module} from a Markdown table's rows ``| `a` | `b` |``."""
    renames = {}
    for line in Path(path).read_text().splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].startswith("keras_caffe.") and cells[1].startswith(
                "keras_caffe."):
            renames[cells[0]] = cells[1]
    return renames


def figures(repo, renames=None):
    """The structure figures of the tree at ``repo`` (a dict)."""
    known, edges = imports(repo)
    renames = renames or {}

    def placed(module):
        if module.startswith("keras_caffe.cli"):
            return module  # what the command line held then counts as command line
        for old in sorted(renames, key=len, reverse=True):
            if module == old or module.startswith(old + "."):
                return renames[old] + module[len(old):]
        return module

    module_level = [(a, b) for a, b, local, _, _ in edges if not local]
    every = [(a, b) for a, b, _, _, _ in edges]
    cli = len(LAYERS) - 1
    into_cli = sorted({(a, b) for a, b, *_ in edges
                       if layer_of(placed(b)) == cli and layer_of(placed(a)) != cli})
    against = sorted({(a, b) for a, b, *_ in edges
                      if layer_of(placed(a)) is not None and layer_of(placed(b)) is not None
                      and layer_of(placed(a)) < layer_of(placed(b))})
    local = [(a, b, line, reason) for a, b, is_local, line, reason in edges if is_local]
    return {
        "modules": len(known),
        "cycles at load": cycles(known, module_level),
        "cycles, function-local imports included": cycles(known, every),
        "library imports of the command line": into_cli,
        "imports against the direction": against,
        "function-local project imports": len(local),
        "function-local project imports without a reason": sorted(
            (a, b, line) for a, b, line, reason in local if not reason),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo", nargs="?", default=str(Path(__file__).resolve().parents[2]))
    parser.add_argument("--renames", help="Markdown table of old -> new module names")
    parser.add_argument("--list", action="store_true", help="print every item, not counts")
    args = parser.parse_args(argv)
    found = figures(args.repo, read_renames(args.renames) if args.renames else None)
    for name, value in found.items():
        if isinstance(value, list):
            modules_in = sum(len(g) for g in value) if "cycles" in name else None
            extra = f" ({modules_in} modules)" if modules_in else ""
            print(f"{name}: {len(value)}{extra}")
            if args.list:
                for item in value:
                    print("   ", item)
        else:
            print(f"{name}: {value}")


if __name__ == "__main__":
    main()
