"""Where the object an expression refers to was made, and how a caller spells an expression.

Two questions real training code splits across functions:

- "what is ``scheduler`` here?": a ``CosineAnnealingLR`` made in ``main()`` and passed down
  to ``train(model, loader, optimizer, scheduler)``; ``creation`` follows the expression to
  the call that made the object;
- "how does the function that runs the epoch loop spell the loader its callee iterates?":
  ``train_one_epoch(model, train_loader)`` iterates ``loader``, which is ``train_loader`` in
  the caller; ``lift`` rewrites an expression of a callee in its caller's terms, for fixes
  that write it there (``update_bn(train_loader, swa_model)`` after the epoch loop).

Both follow the same paths as the value resolver: a name with a single binding, a parameter
to what every in-module caller passes (or its default), ``self.x`` assigned in the class,
and method chains that return the same object (``.to(device)``, ``.cuda()``, ``.eval()``).
Anything else is unknown (None), never guessed.
"""

from __future__ import annotations

import libcst as cst

from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.syntax.values import Binding, ValueResolver

# Methods that return the object they are called on (modules and tensors).
SAME_OBJECT_METHODS = frozenset(
    {
        "to",
        "cuda",
        "cpu",
        "eval",
        "train",
        "float",
        "half",
        "double",
        "bfloat16",
        "requires_grad_",
        "share_memory",
        "to_empty",
    }
)

# What a path that loops back to an expression already being followed answers.
CYCLE = object()


class OriginWalk:
    """Follows an expression back along the paths the value resolver knows: a name to each
    of its bindings, a parameter to what every in-module caller passes (or its default),
    ``self.x`` to its assignments in the class. Each node is followed once (memoized), a
    path that loops back answers ``CYCLE`` and is ignored, and the walk stops at
    ``MAX_DEPTH``. A subclass says what one expression is (``_step``) and how the answers
    of several paths combine (``_combine``)."""

    MAX_DEPTH = 12

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.index = ctx.index
        self.resolver = ctx.get(ValueResolver)
        self._memo: dict[int, object] = {}

    def follow(self, expr: cst.BaseExpression, depth: int) -> object:
        if depth > self.MAX_DEPTH:
            return None
        key = id(expr)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = CYCLE
        found = self._step(expr, depth)
        self._memo[key] = found
        return found

    def _step(self, expr: cst.BaseExpression, depth: int) -> object:
        raise NotImplementedError

    def _combine(self, answers: list[object]) -> object:
        """The answer of several paths (none of them a cycle)."""
        raise NotImplementedError

    def _agree(self, found: list[object]) -> object:
        real = [f for f in found if f is not CYCLE]
        if not real:
            return CYCLE if found else None
        return self._combine(real)

    def _self_attribute(self, expr: cst.Attribute, depth: int) -> object:
        """``self.x``: the answer of every value assigned to it in the class, None when one
        is unknown."""
        cls = self.resolver.class_of_self(expr)
        if cls is None:
            return None
        values = list(self.resolver.self_assignments(cls).get(expr.attr.value, []))
        values.extend(self._more_values(cls, expr.attr.value))
        if not values or any(v is None for v in values):
            return None
        return self._agree([self.follow(v, depth + 1) for v in values if v is not None])

    def _more_values(self, cls: cst.ClassDef, attr: str) -> list[cst.BaseExpression | None]:
        """Values ``self.attr`` takes that are no plain assignment (a subclass may know)."""
        return []

    def _passed(self, binding: Binding, depth: int) -> list[object] | None:
        """For a parameter: the answer of what each in-module caller passes (or the
        default where a call omits it). None when the function is no plain ``def``."""
        function, param = binding.function, binding.param
        if not isinstance(function, cst.FunctionDef) or param is None:
            return None
        found: list[object] = []
        for call in self.resolver.callers(function):
            arg = self.resolver.argument_for(function, param, call)
            if arg is None:
                found.append(self.follow(param.default, depth + 1) if param.default else None)
            else:
                found.append(self.follow(arg, depth + 1))
        return found


def is_self_attribute(expr: cst.BaseExpression) -> bool:
    """``self.x``."""
    return (
        isinstance(expr, cst.Attribute)
        and isinstance(expr.value, cst.Name)
        and expr.value.value == "self"
    )


class Origins(OriginWalk):
    """Creations of objects and expressions lifted into callers, for one module."""

    @classmethod
    def build(cls, ctx: FileContext) -> Origins:
        return cls(ctx)

    # Creations ---------------------------------------------------------------------------------
    def creation(self, expr: cst.BaseExpression) -> cst.Call | None:
        """The call that made the object ``expr`` refers to (None: unknown or ambiguous)."""
        found = self.follow(expr, 0)
        return found if isinstance(found, cst.Call) else None

    def _step(self, expr: cst.BaseExpression, depth: int) -> object:
        if isinstance(expr, cst.Call):
            func = expr.func
            if isinstance(func, cst.Attribute) and func.attr.value in SAME_OBJECT_METHODS:
                return self.follow(func.value, depth + 1)
            return expr
        if isinstance(expr, cst.Name):
            bindings = self.resolver.bindings_of(expr)
            if not bindings:
                return None
            return self._agree([self._binding(b, depth) for b in bindings])
        if isinstance(expr, cst.Attribute) and is_self_attribute(expr):
            return self._self_attribute(expr, depth)
        return None

    def _binding(self, binding: Binding, depth: int) -> object:
        if binding.kind == "assign" and binding.value is not None:
            return self.follow(binding.value, depth + 1)
        if binding.kind == "param" and binding.param is not None:
            found = self._passed(binding, depth)
            if found is None:
                return None
            if not found and binding.param.default is not None:
                found.append(self.follow(binding.param.default, depth + 1))
            return self._agree(found)
        return None

    def _combine(self, answers: list[object]) -> object:
        """The one creation every path leads to."""
        first = answers[0]
        if first is None or any(f is not first for f in answers):
            return None
        return first

    # Lifting into callers ------------------------------------------------------------------------
    def lift(self, expr: cst.BaseExpression, call: cst.Call) -> cst.BaseExpression | None:
        """``expr``, written in the function ``call`` runs, as the caller can write it.

        Parameters become the arguments ``call`` passes (or their defaults), ``self`` stays
        when caller and callee are methods of one class called as ``self.m()``, and names
        bound in an enclosing scope (the module) stay; a local variable of the callee cannot
        be lifted (None).
        """
        return self.lift_through(expr, (call,))

    def lift_through(
        self, expr: cst.BaseExpression, chain: tuple[cst.Call, ...]
    ) -> cst.BaseExpression | None:
        """``expr`` lifted through ``chain``: calls from the outermost caller down to the
        function that holds ``expr``."""
        if not chain:
            return expr
        call, rest = chain[-1], chain[:-1]
        callee = self.index.enclosing(expr, cst.FunctionDef)
        if not isinstance(callee, cst.FunctionDef):
            return expr
        replacements: dict[int, cst.BaseExpression] = {}
        for name in self.load_names(expr):
            bindings = self.resolver.bindings_of(name)
            if bindings is None or self.resolver.visible(name.value, call) is bindings:
                continue
            if len(bindings) != 1 or bindings[0].kind != "param":
                return None
            param = bindings[0].param
            if bindings[0].function is not callee or param is None:
                return None
            lifted: cst.BaseExpression | None
            if name.value in ("self", "cls"):
                if not self._method_call_in_class(call, callee):
                    return None
                assert isinstance(call.func, cst.Attribute)
                lifted = self.lift_through(call.func.value, rest)
            else:
                arg = self.resolver.argument_for(callee, param, call)
                if arg is not None:
                    lifted = self.lift_through(arg, rest)
                elif any(a.star for a in call.args):
                    return None  # passed through *args/**kwargs, or not: unknown
                else:
                    lifted = param.default  # evaluated where the function is defined
            if lifted is None:
                return None
            replacements[id(name)] = lifted
        if not replacements:
            return expr
        if id(expr) in replacements:
            return replacements[id(expr)]
        return expr.visit(_Replace(replacements))  # type: ignore[return-value]

    def _method_call_in_class(self, call: cst.Call, callee: cst.FunctionDef) -> bool:
        func = call.func
        if not (
            isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Name)
            and func.value.value in ("self", "cls")
        ):
            return False
        return self.index.enclosing(call, cst.ClassDef) is self.index.enclosing(
            callee, cst.ClassDef
        )

    def load_names(self, expr: cst.BaseExpression) -> list[cst.Name]:
        """Names read by ``expr`` (not attribute names, keywords or lambda parameters)."""
        found: list[cst.Name] = []
        candidates = [expr] if isinstance(expr, cst.Name) else []
        candidates.extend(self.index.descendants(expr, cst.Name))  # type: ignore[arg-type]
        for name in candidates:
            parent = self.index.parent(name)
            if isinstance(parent, cst.Attribute) and parent.attr is name:
                continue
            if isinstance(parent, cst.Arg) and parent.keyword is name:
                continue
            if isinstance(parent, cst.Param):
                continue
            found.append(name)
        return found


class _Replace(cst.CSTTransformer):
    def __init__(self, replacements: dict[int, cst.BaseExpression]) -> None:
        super().__init__()
        self.replacements = replacements

    def on_leave(self, original_node, updated_node):  # type: ignore[override]
        return self.replacements.get(id(original_node), updated_node)
