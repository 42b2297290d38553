"""Where Caffe's relative paths are looked for."""

import os


def candidates(path, anchor):
    """The places to look for ``path``: as given (Caffe opens it from the
    current directory), then, when it is relative, next to the file
    ``anchor`` (the prototxt or solver file that names it), if there is one."""
    found = [path]
    if not os.path.isabs(path) and anchor is not None and os.path.isfile(str(anchor)):
        found.append(os.path.join(os.path.dirname(os.path.abspath(anchor)), path))
    return found


def locate(path, anchor, exists=os.path.exists):
    """The first of ``candidates(path, anchor)`` that ``exists``, else None."""
    return next((c for c in candidates(path, anchor) if exists(c)), None)
