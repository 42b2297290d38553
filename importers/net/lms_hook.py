"""Where ``import_model`` meets Large Model Support without importing it.

LMS (``keras_caffe.lms``) is a layer above the importers: it plans from
their nets, so they never import it. It reaches ``import_model`` through
this module instead:

- ``active()``: this thread's ``with keras_caffe.LMS(...)`` blocks, innermost
  last; LMS pushes a block on entering and pops it on leaving, and
  ``current()`` is what ``import_model`` attaches when given no ``lms``.
- an LMS is used duck-typed, through the one method it offers for an
  imported net: ``lms.attach_to(imported, phase=..., level=..., stages=...,
  data_format=...)``, ``imported`` being the ``ImportedNet`` (model, filtered
  net, blobs) that ``import_net`` returns; it applies LMS to
  ``imported.model`` and returns it.
"""

import threading

_local = threading.local()


def active():
    """This thread's entered ``with keras_caffe.LMS(...)`` blocks, innermost
    last: the list LMS appends to on ``__enter__`` and pops on ``__exit__``."""
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def current():
    """The innermost active ``with keras_caffe.LMS(...)`` block's LMS, or None."""
    stack = active()
    return stack[-1] if stack else None


def is_lms(value):
    """Whether ``value`` is an LMS ``import_model`` can attach: an object
    (not a class) offering ``attach_to``."""
    return not isinstance(value, type) and callable(getattr(value, "attach_to", None))

