"""An optimizer's update run as each Keras backend's trainer runs it, outside
``model.fit``: for tests that replay gradients into an optimizer and read
its state after every update.

    apply = traced_apply(optimizer, variables)  # or jit_compile=False / True
    apply(grads)            # one update; the variables hold the new values
    apply.op_names(grads)   # the traced program's operations (None: not traced)
    compiled(function, jit_compile=True)  # any function, likewise

``jit_compile`` as ``model.compile`` takes it; None (the default): traced as
each backend traces, for tests whose subject is the numbers, not the mode.

- TensorFlow: ``tf.function`` of ``optimizer.apply`` (``jit_compile``: XLA;
  None: a graph without XLA), as Keras's TensorFlow trainer traces its step.
- JAX: ``optimizer.stateless_apply`` (what Keras's JAX trainer calls, in a
  ``StatelessScope``), under ``jax.jit`` with ``jit_compile`` True or None
  (JAX traces to compile) and op by op with False (Keras's uncompiled JAX
  step, about 0.1 s per update here); the new values are then assigned to
  the variables.
- PyTorch: ``optimizer.apply`` op by op, as Keras's PyTorch trainer runs it
  by default (its compiled step, ``torch.compile``, takes minutes per case:
  the suite leaves it out).
"""

import keras

BACKEND = keras.backend.backend()

#: ``jit_compile`` values of a compiled training step each backend's tests
#: run: PyTorch's ``torch.compile`` is left out (minutes per case, and not
#: Keras's default there).
JIT = {"tensorflow": [False, True], "jax": [False, True], "torch": [False]}[BACKEND]
#: ``model.compile``'s ``jit_compile`` for fit tests whose subject is not how
#: the step runs: TensorFlow's traced graph, JAX's compiled step (its
#: uncompiled one dispatches op by op, about 0.3 s per YellowFin step here),
#: PyTorch op by op.
TRACED_STEP = {"tensorflow": False, "jax": True, "torch": False}[BACKEND]


class _TensorFlow:
    @staticmethod
    def compile(function, jit_compile):
        import tensorflow as tf  # here: the backend in use (the others lack TensorFlow)

        return tf.function(function, jit_compile=bool(jit_compile))

    def __init__(self, optimizer, variables, jit_compile):
        self.function = self.compile(lambda grads: optimizer.apply(grads, variables),
                                     jit_compile)

    def __call__(self, grads):
        self.function([keras.ops.convert_to_tensor(g) for g in grads])

    def op_names(self, grads):
        """The traced graph's op types, its functions' included."""
        graph = self.function.get_concrete_function(
            [keras.ops.convert_to_tensor(g) for g in grads]).graph.as_graph_def()
        return [n.op for n in list(graph.node) + [n for f in graph.library.function
                                                   for n in f.node_def]]


class _Jax:
    @staticmethod
    def compile(function, jit_compile):
        import jax  # here: the backend in use

        return jax.jit(function) if jit_compile else function

    def __init__(self, optimizer, variables, jit_compile):
        import jax  # here: the backend in use

        if not optimizer.built:
            optimizer.build(variables)
        self.optimizer, self.variables = optimizer, list(variables)

        def step(state, weights, grads):
            return optimizer.stateless_apply(state, grads, weights)

        self.step = step if jit_compile is False else jax.jit(step)
        self.make_jaxpr = lambda *args: jax.make_jaxpr(step)(*args)

    def _arguments(self, grads):
        return ([v.value for v in self.optimizer.variables], [v.value for v in self.variables],
                [keras.ops.convert_to_tensor(g) for g in grads])

    def __call__(self, grads):
        weights, state = self.step(*self._arguments(grads))
        for variable, value in zip(self.variables, weights):
            variable.assign(value)
        for variable, value in zip(self.optimizer.variables, state):
            variable.assign(value)

    def op_names(self, grads):
        """The jaxpr's primitives, its sub-jaxprs' (conditionals, nested jits) included."""
        from jax.extend.core import subjaxprs  # here: the backend in use

        names, stack = [], [self.make_jaxpr(*self._arguments(grads)).jaxpr]
        while stack:
            jaxpr = stack.pop()
            names += [eqn.primitive.name for eqn in jaxpr.eqns]
            stack.extend(subjaxprs(jaxpr))
        return names


class _Torch:
    @staticmethod
    def compile(function, jit_compile):
        return function  # op by op (torch.compile: minutes)

    def __init__(self, optimizer, variables, jit_compile):
        self.optimizer, self.variables = optimizer, list(variables)

    def __call__(self, grads):
        self.optimizer.apply([keras.ops.convert_to_tensor(g) for g in grads], self.variables)

    def op_names(self, grads):
        return None  # op by op: no traced program


_BY_BACKEND = {"tensorflow": _TensorFlow, "jax": _Jax, "torch": _Torch}


def compiled(function, jit_compile=False):
    """``function`` traced (TensorFlow: ``tf.function``), compiled with XLA
    (``jit_compile``: ``tf.function(jit_compile=True)``, ``jax.jit``) or as it
    is (JAX without ``jit_compile``, PyTorch)."""
    return _BY_BACKEND[BACKEND].compile(function, jit_compile)


def traced_apply(optimizer, variables, jit_compile=None):
    """``optimizer``'s update of ``variables`` as a function of the gradients,
    traced (TensorFlow), compiled (``jit_compile``: XLA on TensorFlow and JAX)
    or op by op, as the backend's trainer runs it (see the module's doc)."""
    return _BY_BACKEND[BACKEND](optimizer, variables, jit_compile)
