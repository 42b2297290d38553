"""Every snippet of README.md and docs/*.md runs as written, so the documents cannot drift.

- Each ```python block of README.md and of every docs/*.md page runs in its
  own subprocess (the installed package), from a temporary folder holding
  the files the documents name: ``solver.prototxt`` and its
  ``train_net.prototxt`` with their HDF5 data (the golden ``sgd`` case),
  ``deploy.prototxt`` and ``net.caffemodel`` (the golden LeNet). A
  ``print(...)`` line with a comment (``print(solver.iter)   # 30``, or
  ``# VALUE: what it is``; ``...`` ends a prefix) must print what it says.
- A block that cannot run that way says so in the Markdown, on the line
  right before its fence, and nothing else is skipped:
  ``<!-- not run: REASON -->`` (a GPU, an elastic ``horovodrun`` launch, a
  user's own data, ...): it is only compiled;
  ``<!-- needs Horovod -->``: it runs in one process where Horovod is
  installed and is skipped, saying so, where not (a failure under
  ``KERAS_CAFFE_EXPECT_HOROVOD=1``);
  ``<!-- horovodrun -np N -->``: it runs as ``train.py`` under
  ``horovodrun -np N -H localhost:N --gloo`` (Horovod as above);
  ``<!-- tensorflow only -->``: it uses a TensorFlow-only feature
  (``Solver``/``get_solver``, the data layers as ``tf.data``, LMS,
  MirroredStrategy) and runs as written on TensorFlow;
  ``<!-- jax only -->``: it uses a JAX-only feature
  (``keras_caffe.data_parallel``) and runs as written on JAX.
  A marker without a reason, misspelt, or not right before a ```python
  fence fails, and so does a block that imports TensorFlow without one.
- On JAX and PyTorch (``KERAS_BACKEND``, no TensorFlow installed) every
  block runs as on TensorFlow but those marked ``tensorflow only``, ``needs
  Horovod`` or ``horovodrun``: those run in one process and must stop with
  the one line that says TensorFlow is needed (keras-caffe's
  ``TensorFlowRequirementError``, or Python's for an ``import tensorflow``),
  so a marker cannot hide a block that runs on every backend. Likewise a
  ``jax only`` block on TensorFlow and PyTorch stops with the one line
  saying JAX is needed (``BackendRequirementError``).
- Every ``keras-caffe <subcommand> --flag`` the documents show (in code
  blocks, and in inline code with a flag or alone) must be a subcommand and
  a flag of the installed CLI's parser (``keras-caffe <sub> --help``, run in
  this process by ``support.cli_runner.run_cli``); together they show every
  subcommand, and docs/cli.md every option of each.
- Every relative link between the documents names a file that exists, and
  so does every repository path they name (``tests/...``, ``examples/...``).
"""

import functools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import keras
import pytest
from keras_caffe.backends import require_jax_backend, require_tensorflow_backend
from keras_caffe.errors import BackendRequirementError

from support.cli_runner import run_cli
from support.horovod_jobs import horovodrun, require_horovod

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden"

README = (REPO / "README.md").read_text()
#: The documents whose snippets run and whose keras-caffe command lines are checked.
DOCUMENTS = {"README.md": README,
             **{f"docs/{p.name}": p.read_text() for p in sorted((REPO / "docs").glob("*.md"))}}
NEWLINE = "\n"
FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```", re.DOTALL | re.MULTILINE)
#: A marker: an HTML comment alone on the line right before a fence.
MARKER = re.compile(r"<!--(.*?)-->\s*\Z", re.DOTALL)
NOT_RUN = re.compile(r"\s*not run:\s*(\S.*?)\s*", re.DOTALL)
NEEDS_HOROVOD = re.compile(r"\s*needs Horovod\s*")
HOROVODRUN = re.compile(r"\s*horovodrun -np ([1-9][0-9]*)\s*")
TENSORFLOW_ONLY = re.compile(r"\s*tensorflow only\s*")
JAX_ONLY = re.compile(r"\s*jax only\s*")
#: The kinds of block that need TensorFlow: elsewhere they must say so, in one line.
NEEDS_TENSORFLOW = ("tensorflow only", "horovod", "horovodrun")
#: The Keras backend of this run (KERAS_BACKEND; make test-backends sets it).
BACKEND = keras.backend.backend()
#: How many ```python blocks run, README.md and docs/ together: 9 before the README's
#: manual moved into docs/ (the README's 8, docs/lms.md's 1), 14 since.
BLOCKS_RUN_BEFORE = 14


def _marker(text, start):
    """The HTML comment on the line right before offset ``start`` (a fence), or None."""
    before = text[:start].rstrip(" \t")
    if not before.endswith("\n"):
        return None
    last_line = before[:-1].rsplit("\n", 1)[-1]
    found = MARKER.search(last_line)
    return found[1] if found and last_line.lstrip().startswith("<!--") else None


def python_blocks(documents=None):
    """(document, first line number, code, marker) of each ```python block;
    the marker is the comment right before the fence (None: none)."""
    blocks = []
    for name, text in (documents or DOCUMENTS).items():
        for m in FENCE.finditer(text):
            if m.group(1) == "python":
                blocks.append((name, text.count(NEWLINE, 0, m.start()) + 2, m.group(2),
                               _marker(text, m.start())))
    return blocks


def _kind(marker):
    """'run', 'tensorflow only', 'jax only', 'horovod', 'horovodrun' or 'not
    run' for a block's marker; ValueError for any other."""
    if marker is None:
        return "run"
    if TENSORFLOW_ONLY.fullmatch(marker):
        return "tensorflow only"
    if JAX_ONLY.fullmatch(marker):
        return "jax only"
    if NEEDS_HOROVOD.fullmatch(marker):
        return "horovod"
    if HOROVODRUN.fullmatch(marker):
        return "horovodrun"
    if NOT_RUN.fullmatch(marker):
        return "not run"
    raise ValueError(f"unknown marker <!--{marker}-->: write <!-- not run: REASON -->, "
                     "<!-- tensorflow only -->, <!-- jax only -->, <!-- needs Horovod --> or "
                     "<!-- horovodrun -np N -->")


#: Runs a block (the file argv[1]) as ``python -c`` would, recording what each
#: ``print`` call of the block prints, by line, into the JSON file argv[2].
RUNNER = """
import builtins, io, json, sys
block, record = sys.argv[1], sys.argv[2]
printed = []

def print(*args, **kwargs):
    if kwargs.get("file") is None and sys._getframe(1).f_code.co_filename == "<block>":
        text = io.StringIO()
        builtins.print(*args, **dict(kwargs, file=text))
        printed.append([sys._getframe(1).f_lineno, text.getvalue()])
    builtins.print(*args, **kwargs)

try:
    exec(compile(open(block).read(), "<block>", "exec"), {"__name__": "__main__", "print": print})
finally:
    with open(record, "w") as f:
        json.dump(printed, f)
"""
#: ``print(...)   # VALUE`` or ``# VALUE: what it is``: the comment says what the line prints.
PRINT_COMMENT = re.compile(r"^\s*print\(.*\)\s+#\s?(.*?)\s*$")


def printed_claims(code):
    """{line: VALUE} of the block's print lines with a comment; a VALUE ending
    in ``...)`` or ``...`` claims the start of the output only."""
    claims = {}
    for number, text in enumerate(code.splitlines(), 1):
        m = PRINT_COMMENT.match(text)
        if m:
            claims[number] = m.group(1).split(": ")[0]
    return claims


def _claim_holds(claim, output):
    output = output.strip()
    for ellipsis in (", ...)", "..."):
        if claim.endswith(ellipsis):
            return output.startswith(claim[:-len(ellipsis)])
    return output == claim


def _env():
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", COLUMNS="200")


@pytest.fixture
def readme_folder(tmp_path):
    """The files the documents' snippets name, in a fresh folder (from the
    golden recordings in the repository, tests/golden)."""
    shutil.copytree(GOLDEN / "solvers" / "sgd", tmp_path, dirs_exist_ok=True)
    lenet = GOLDEN / "forward" / "lenet"
    shutil.copy(lenet / "deploy_used.prototxt", tmp_path / "deploy.prototxt")
    shutil.copy(lenet / "weights.caffemodel", tmp_path / "net.caffemodel")
    return tmp_path


def _block_id(value):
    if isinstance(value, tuple):
        return f"{value[0]}:{value[1]}"
    return ""


def test_the_documents_have_python_blocks():
    """No block is lost when text moves between README.md and docs/: as many
    run (or run with Horovod) as before, and README.md keeps some."""
    kinds = [_kind(marker) for _, _, _, marker in python_blocks()]
    assert len(kinds) - kinds.count("not run") >= BLOCKS_RUN_BEFORE
    assert len(python_blocks({"README.md": README})) >= 3


def test_every_marker_is_well_formed_and_stands_before_a_python_block():
    """A ``not run`` / ``needs Horovod`` comment that is misspelt, has no
    reason, or stands before no ```python fence would skip nothing or hide a
    block: each is reported with its place."""
    problems = []
    for name, text in DOCUMENTS.items():
        fences = {m.start(): m.group(1) for m in FENCE.finditer(text)}
        for m in re.finditer(r"<!--(.*?)-->", text, re.DOTALL):
            if not re.match(r"\s*(not run|needs|horovodrun|tensorflow|jax)\b", m.group(1),
                            re.IGNORECASE):
                continue
            line = f"{name}:{text.count(NEWLINE, 0, m.start()) + 1}"
            try:
                _kind(m.group(1))
            except ValueError as error:
                problems.append(f"{line}: {error}")
                continue
            after = text.index("\n", m.end()) + 1 if "\n" in text[m.end():] else len(text)
            if fences.get(after) != "python":
                problems.append(f"{line}: the marker is not on the line right before "
                                "a ```python fence")
    assert problems == []


def test_the_marker_rules_catch_a_bad_marker():
    """The checks above see each kind, a marker without a reason and a
    misplaced one."""
    text = ("<!-- not run: needs a GPU -->\n```python\nx = 1\n```\n"
            "<!-- needs Horovod -->\n```python\ny = 2\n```\n"
            "```python\nz = 3\n```\n<!-- horovodrun -np 2 -->\n```python\nw = 4\n```\n"
            "<!-- tensorflow only -->\n```python\nv = 5\n```\n"
            "<!-- jax only -->\n```python\nu = 6\n```\n")
    blocks = python_blocks({"t.md": text})
    assert [(line, _kind(marker)) for _, line, _, marker in blocks] == [
        (3, "not run"), (7, "horovod"), (10, "run"), (14, "horovodrun"), (18, "tensorflow only"),
        (22, "jax only")]
    for bad in (" not run: ", " skip ", " horovodrun -np two ", " tensorflow-only ",
                " TensorFlow only ", " jax-only "):
        with pytest.raises(ValueError, match="unknown marker"):
            _kind(bad)
    assert _marker("<!-- not run: x -->\n\n```python\n", len("<!-- not run: x -->\n\n")) is None


#: A block that imports TensorFlow itself (``import tensorflow as tf``, ``from tensorflow ...``).
IMPORTS_TENSORFLOW = re.compile(r"^\s*(?:import\s+(?:[\w.]+(?:\s+as\s+\w+)?\s*,\s*)*"
                                r"tensorflow\b|from\s+tensorflow\b)", re.MULTILINE)


def test_blocks_importing_tensorflow_say_they_need_it():
    """A block that imports TensorFlow is marked ``tensorflow only`` (or
    Horovod's, or not run): on JAX and PyTorch it cannot run."""
    unmarked = [f"{name}:{line}" for name, line, code, marker in python_blocks()
                if IMPORTS_TENSORFLOW.search(code) and _kind(marker) == "run"]
    assert unmarked == []
    assert [bool(IMPORTS_TENSORFLOW.search(code)) for code in (
        "import keras, numpy as np, tensorflow as tf\n", "from tensorflow import keras\n",
        "  import tensorflow\n", "import tensorflow_datasets\n", "x = 'import tensorflow'\n",
        "import keras  # no tensorflow here\n")] == [True, True, True, False, False, False]


def _run_block(code, folder):
    """The block run as a user's script in a new interpreter, by RUNNER: the
    process and {line: [what each print of that line printed]}."""
    script, record = folder / "_block.py", folder / "_printed.json"
    script.write_text(code)
    record.unlink(missing_ok=True)
    proc = subprocess.run([sys.executable, "-c", RUNNER, script, record], cwd=folder,
                          env=_env(), capture_output=True, text=True, timeout=600)
    printed = {}
    for at, text in json.loads(record.read_text()) if record.is_file() else []:
        printed.setdefault(at, []).append(text)
    return proc, printed


#: The last line of a block that needs TensorFlow, on JAX or PyTorch: keras-caffe's
#: one line (its feature, then what ``require_tensorflow_backend`` says), or
#: Python's for the block's own ``import tensorflow``.
REFUSED = re.compile(r"keras_caffe\.errors\.TensorFlowRequirementError: (.+?) needs Keras's "
                     r"TensorFlow backend and the backend is .*")
NO_TENSORFLOW = "ModuleNotFoundError: No module named 'tensorflow'"


def _refusal(require, feature):
    """What ``require(feature)`` (``require_tensorflow_backend``,
    ``require_jax_backend``) raises on this backend, as a traceback's last line."""
    try:
        require(feature)
    except BackendRequirementError as error:
        return f"keras_caffe.errors.{type(error).__name__}: {error}"
    raise AssertionError(f"{feature}: {require.__name__} raised nothing on {BACKEND}")


def _ends_with_refusal(stderr, pattern, require, also=()):
    """Whether ``stderr`` ends with ``require``'s one line word for word (its
    feature read by ``pattern``), or with one of the lines ``also``."""
    lines = stderr.rstrip().splitlines()
    if not lines:
        return False
    found = pattern.fullmatch(lines[-1])
    return lines[-1] in also or (found is not None and lines[-1] == _refusal(require, found[1]))


def _says_tensorflow_is_needed(stderr):
    """Whether ``stderr`` ends with the one line saying TensorFlow is needed."""
    return _ends_with_refusal(stderr, REFUSED, require_tensorflow_backend, also=(NO_TENSORFLOW,))


#: The last line of a JAX-only block on TensorFlow or PyTorch.
JAX_REFUSED = re.compile(r"keras_caffe\.errors\.BackendRequirementError: (.+?) needs Keras's "
                         r"JAX backend and the backend is .*")


def _says_jax_is_needed(stderr):
    """Whether ``stderr`` ends with ``require_jax_backend``'s one line, word for word."""
    return _ends_with_refusal(stderr, JAX_REFUSED, require_jax_backend)


def test_the_refusal_check_wants_the_whole_line(monkeypatch):
    """What a TensorFlow-needing block must end with off TensorFlow: Python's
    line for ``import tensorflow``, or keras-caffe's line word for word (a
    feature named with spaces too); another error, a changed or cut line, or
    nothing, is not it."""
    import keras_caffe.backends

    monkeypatch.setattr(keras_caffe.backends, "backend_name", lambda: "jax")
    feature = "keras_caffe.lms (Large Model Support)"
    line = _refusal(require_tensorflow_backend, feature)
    assert line == (
        "keras_caffe.errors.TensorFlowRequirementError: keras_caffe.lms (Large Model Support) "
        "needs Keras's TensorFlow backend and the backend is 'jax': run with "
        "KERAS_BACKEND=tensorflow (TensorFlow >= 2.16: pip install 'keras-caffe[tensorflow]'); "
        "on jax keras-caffe offers the solvers, schedules, importer, snapshots and callbacks "
        "(docs/backends.md)")
    traceback = "Traceback (most recent call last):\n  File \"<block>\", line 3\n"
    assert _says_tensorflow_is_needed(f"{traceback}{line}\n")
    assert _says_tensorflow_is_needed(f"{traceback}{NO_TENSORFLOW}\n")
    assert not _says_tensorflow_is_needed(f"{traceback}{line[:-1]}\n")
    assert not _says_tensorflow_is_needed(f"{line}\nValueError: x\n")
    assert not _says_tensorflow_is_needed("ModuleNotFoundError: No module named 'horovod'\n")
    assert not _says_tensorflow_is_needed("")


@pytest.mark.parametrize("block", python_blocks(), ids=_block_id)
def test_python_block_runs(block, readme_folder):
    """The block runs as its marker says and exits 0 without a traceback;
    its commented print lines print what their comments say. On JAX and
    PyTorch a block that needs TensorFlow stops with the one line saying so."""
    name, line, code, marker = block
    kind = _kind(marker)
    if kind == "not run":
        # it cannot run here (the reason is in the Markdown): it must still be Python
        compile(code, f"{name}:{line}", "exec")
        pytest.skip(f"{name}:{line}: not run: {NOT_RUN.fullmatch(marker)[1]}")
    if kind in NEEDS_TENSORFLOW and BACKEND != "tensorflow":
        # the user of another backend who runs it gets told, in one line, and no more
        proc, _ = _run_block(code, readme_folder)
        assert proc.returncode == 1, f"{name}:{line} ran on {BACKEND}: drop its marker"
        assert _says_tensorflow_is_needed(proc.stderr), f"{name}:{line}:\n{proc.stderr[-3000:]}"
        return
    if kind == "jax only" and BACKEND != "jax":
        proc, _ = _run_block(code, readme_folder)
        assert proc.returncode == 1, f"{name}:{line} ran on {BACKEND}: drop its marker"
        assert _says_jax_is_needed(proc.stderr), f"{name}:{line}:\n{proc.stderr[-3000:]}"
        return
    if kind in ("horovod", "horovodrun"):
        require_horovod()  # skips, saying so, without Horovod (fails if it is expected)
    if kind == "horovodrun":
        # processes: the block is a user's train.py under a real horovodrun
        (readme_folder / "train.py").write_text(code)
        np_ = int(HOROVODRUN.fullmatch(marker)[1])
        proc = horovodrun(["train.py"], np=np_, timeout=600, cwd=readme_folder)
        assert proc.returncode == 0, f"{name}:{line}:\n{code}\n{proc.stdout[-3000:]}"
        assert "Traceback" not in proc.stdout, proc.stdout[-3000:]
        return
    # a process: the block runs as written, as a user's script, in a new interpreter
    proc, printed = _run_block(code, readme_folder)
    assert proc.returncode == 0, f"{name}:{line}:\n{code}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    # each print line with a comment prints what the comment says
    wrong = []
    for number, claim in printed_claims(code).items():
        outputs = printed.get(number, [])
        if not outputs or not all(_claim_holds(claim, text) for text in outputs):
            wrong.append(f"{name}:{line + number - 1}: says {claim!r}, printed {outputs!r}")
    assert wrong == []


def test_the_documents_say_what_their_prints_print():
    """README.md's blocks and docs/solvers.md's state printed values, which
    test_python_block_runs compares with what each print prints."""
    claims = {name: printed_claims(code) for name, _, code, marker in python_blocks()
              if _kind(marker) == "run"}   # what runs on every backend
    assert all(claims[name] for name in ("README.md", "docs/solvers.md"))
    assert printed_claims("x = 1\nprint(x)   # 1: the value\nprint(opt)  # SGD(lr=1, ...)\n") == {
        2: "1", 3: "SGD(lr=1, ...)"}
    assert _claim_holds("SGD(lr=1, ...)", "SGD(lr=1, momentum=0)\n")
    assert not _claim_holds("30", "29\n") and _claim_holds("30", "30\n")


# -- the links --------------------------------------------------------------------------------

LINK = re.compile(r"\]\(([^)\s#]+)(#[^)\s]*)?\)")
#: A path in the repository that a document names: a top-level folder of it,
#: then file or folder names (not a glob; ``_placeholder`` tells a pattern).
REPO_PATH = re.compile(r"(?<![\w./~$-])((?:tests|benchmarks|examples|keras_caffe|importers|"
                       r"callbacks|docs)/[\w./-]*[\w/])(?![\w*<])")


def test_every_relative_link_names_a_file():
    """``[cli.md](cli.md)``, ``[docs/lms.md](docs/lms.md)``: the page linked to
    exists, next to the linking one."""
    missing = []
    for name, text in DOCUMENTS.items():
        folder = (REPO / name).parent
        for m in LINK.finditer(text):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):
                continue  # a URL
            if not (folder / target).exists():
                missing.append(f"{name}:{text.count(NEWLINE, 0, m.start()) + 1}: {target}")
    assert missing == []


@pytest.mark.parametrize("name", list(DOCUMENTS))
def test_every_repository_path_named_exists(name):
    """``tests/training/test_signals.py``, ``examples/lenet_solver/``: the
    files the prose points to are where it says (test files move); fenced
    blocks are left out (a quoted output names the files of its day)."""
    text = FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), DOCUMENTS[name])
    missing = [f"{name}:{text.count(NEWLINE, 0, m.start()) + 1}: {m.group(1)}"
               for m in REPO_PATH.finditer(text)
               if not _placeholder(m.group(1)) and not (REPO / m.group(1)).exists()]
    assert missing == []


def _placeholder(path):
    """``keras_caffe/X/``, ``tests/importers/X/test_NAME.py``: a pattern, not a file."""
    return any(re.fullmatch(r"[A-Z]+", part.split(".")[0].rsplit("_", 1)[-1])
               for part in path.strip("/").split("/"))


def test_the_path_check_sees_paths_and_leaves_patterns():
    """Paths in prose and inline code are seen; globs, home and parent
    folders, ``<name>`` and capitalised placeholders are not checked."""
    text = ("`tests/training/test_signals.py`, examples/lenet_solver/ and "
            "`importers/snapshot*.py`, `importers/layer_types/X.py`, ~/.cache/keras-caffe/x, "
            "`../shared/golden/forward/`, `tests/<name>`, `tests/X/test_NAME.py`")
    found = [m.group(1) for m in REPO_PATH.finditer(text)]
    assert found == ["tests/training/test_signals.py", "examples/lenet_solver/",
                     "importers/layer_types/X.py", "tests/X/test_NAME.py"]
    assert [path for path in found if not _placeholder(path)] == found[:2]


# -- the CLI lines ----------------------------------------------------------------------------

COMMAND = re.compile(r"\bkeras-caffe[ \t]+([a-z][a-z_-]*)([^\n`]*)")
#: Where a shell command ends: a pipe, a redirection, a comment, a sequence.
END = re.compile(r"\s(?:\||2>&1|#|;|&&|\(or\b)")


def cli_uses(text=README, name="README.md"):
    """{subcommand: {flag: "file:line"}} of every keras-caffe command shown:
    each line of a fenced block, and inline code that holds a flag or is
    just ``keras-caffe <word>`` (not prose such as an error message)."""
    spans = []
    for m in FENCE.finditer(text):
        offset = m.start(2)
        # a shell line continued with a backslash is one command
        for chunk in re.split(r"(?<!\\)\n", m.group(2)):
            spans.append((offset, chunk.replace("\\\n", " ")))
            offset += len(chunk) + 1
    outside = FENCE.sub(lambda m: " " * len(m.group(0)), text)
    for m in re.finditer(r"`([^`]+)`", outside):
        code = " ".join(m.group(1).split())
        if re.fullmatch(r"keras-caffe [a-z_-]+", code) or (
                "keras-caffe " in code and " --" in code):
            spans.append((m.start(1), code))
    uses = {}
    for offset, span in spans:
        line = f"{name}:{text.count(NEWLINE, 0, offset) + 1}"
        for m in COMMAND.finditer(span):
            rest = END.split(m.group(2), maxsplit=1)[0]
            flags = uses.setdefault(m.group(1), {})
            for token in rest.split():
                token = token.strip("[]()")
                if re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", token):
                    flags.setdefault(token.split("=")[0], line)
    return uses


@functools.lru_cache(maxsize=None)
def cli_help(*args):
    proc = run_cli(*args, "--help", env={"TF_CPP_MIN_LOG_LEVEL": "3"}, columns=200)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _subcommands():
    return set(re.search(r"\{([a-z_,-]+)\}", cli_help())[1].split(","))


def test_the_documents_show_every_cli_subcommand():
    """README.md shows training and importing; the documents together show
    every subcommand the CLI has."""
    uses = cli_uses()
    assert "--solver" in uses["train"] and "import" in uses
    shown = {}
    for name, text in DOCUMENTS.items():
        for sub, flags in cli_uses(text, name).items():
            shown.setdefault(sub, set()).update(flags)
    assert _subcommands() <= set(shown)
    assert "--list-layers" in shown["import"]


@pytest.mark.parametrize("name", list(DOCUMENTS))
def test_every_cli_subcommand_and_flag_shown_exists(name):
    """Each ``keras-caffe <sub> --flag`` the document shows is one the CLI has."""
    subcommands = _subcommands()
    problems = []
    for sub, flags in sorted(cli_uses(DOCUMENTS[name], name).items()):
        if sub not in subcommands:
            problems.append(f"{name}: keras-caffe {sub}: no such subcommand "
                            f"({sorted(subcommands)})")
            continue
        known = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", cli_help(sub)))
        problems += [f"{line}: keras-caffe {sub} {flag}: no such flag"
                     for flag, line in sorted(flags.items()) if flag not in known]
    assert problems == []


def _options(help_text):
    """Each option of a ``--help`` as the tuple of its spellings
    (``("--solver", "-solver")``), less ``-h``/``--help``."""
    options = []
    for m in re.finditer(r"^  (-\S.*?)(?:  |$)", help_text, re.MULTILINE):
        spellings = tuple(part.split()[0] for part in m.group(1).split(", "))
        if "--help" not in spellings:
            options.append(spellings)
    return options


def test_the_cli_reference_shows_every_option_of_every_subcommand():
    """docs/cli.md shows each subcommand with every option its parser has
    (one spelling of each)."""
    shown = cli_uses(DOCUMENTS["docs/cli.md"], "docs/cli.md")
    missing = []
    for sub in sorted(_subcommands()):
        for spellings in _options(cli_help(sub)):
            if not set(spellings) & set(shown.get(sub, {})):
                missing.append(f"keras-caffe {sub} {spellings[0]}")
    assert missing == []


def test_the_option_reader_reads_argparse_help():
    """Every spelling of each option, long or short, first on its help line."""
    text = ("options:\n  -h, --help            show this help message and exit\n"
            "  --solver SOLVER, -solver SOLVER\n                        the solver.prototxt\n"
            "  --log {progress,caffe}, --log-format {progress,caffe}\n"
            "  --jit {auto,on,off}   XLA for the train step\n  -o OUTPUT, --output OUTPUT\n")
    assert _options(text) == [("--solver", "-solver"), ("--log", "--log-format"), ("--jit",),
                              ("-o", "--output")]


def test_the_flag_check_finds_a_wrong_flag():
    """The extraction sees flags in code blocks and inline code."""
    text = ("Text `keras-caffe needs TensorFlow` and `keras-caffe import`.\n"
            "```\nkeras-caffe train --solver s.prototxt --no-such-flag 2>&1 | tee x\n```\n"
            "Inline: `keras-caffe time --model m --bogus`.\n"
            "```sh\nkeras-caffe analyze n.prototxt \\\n    --batch 8 --wrong\n```\n")
    uses = cli_uses(text, "t.md")
    assert uses["import"] == {} and "needs" not in uses
    assert uses["train"]["--no-such-flag"] == "t.md:3"
    assert "--no-such-flag" in uses["train"] and "--bogus" in uses["time"]
    assert "tee" not in uses and "-x" not in uses["train"]
    assert uses["analyze"] == {"--batch": "t.md:7", "--wrong": "t.md:7"}
