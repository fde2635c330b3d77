"""Which objects are optimizers, by where they come from rather than what they are called.

``sgd.step()`` under an accumulation guard is the optimizer step whatever the variable is
called; ``env.step()`` or ``sched.step()`` is not. The loop analysis first trusts the name
(``optimizer``, ``opt``, ``optim_g``); for any other receiver of ``.step()`` this provider
follows the object back to where it was made:

- a call of an optimizer class or factory: anything under ``torch.optim`` (but its
  schedulers and ``swa_utils``), the optimizers of timm, transformers, bitsandbytes, apex,
  DeepSpeed, torch-optimizer, lion-pytorch, or a class of these well-known names
  (``Lion(...)``, ``Adafactor(...)``), or a factory ``create_optimizer_v2(...)``;
- a class of the module derived from ``Optimizer``;
- the optimizer handed back by ``accelerator.prepare(model, opt, loader)``,
  ``fabric.setup(model, opt)`` or ``amp.initialize(model, opt)`` (position by position);
- a parameter annotated as an optimizer (``opt: torch.optim.Optimizer``), or one every
  in-module caller passes an optimizer to;
- ``self.x`` assigned one of the above in the class.

Every binding of the name must agree: a name also bound to something else is unknown, and
unknown is never an optimizer (precision first).
"""

from __future__ import annotations

import libcst as cst

from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.syntax.names import ImportTable, dotted_name
from ema_lint.analysis.syntax.origins import CYCLE, OriginWalk, is_self_attribute
from ema_lint.analysis.syntax.values import Binding

# Libraries whose callables, under these module paths, make optimizers.
_OPTIMIZER_MODULES = (
    "torch.optim.",
    "timm.optim.",
    "bitsandbytes.optim.",
    "apex.optimizers.",
    "deepspeed.ops.adam.",
    "deepspeed.ops.lamb.",
    "torch_optimizer.",
    "lion_pytorch.",
    "transformers.optimization.",
    "schedulefree.",
    "prodigyopt.",
    "dadaptation.",
)
_NOT_OPTIMIZER_MODULES = ("torch.optim.lr_scheduler.", "torch.optim.swa_utils.")
_TRANSFORMERS_OPTIMIZERS = frozenset({"transformers.AdamW", "transformers.Adafactor"})
# Class names that are optimizers wherever they come from.
_OPTIMIZER_CLASSES = frozenset(
    {
        "SGD",
        "Adam",
        "AdamW",
        "Adamax",
        "Adagrad",
        "Adadelta",
        "ASGD",
        "LBFGS",
        "NAdam",
        "RAdam",
        "RMSprop",
        "Rprop",
        "SparseAdam",
        "Adafactor",
        "Lion",
        "Lamb",
        "LAMB",
        "LARS",
        "Lars",
        "FusedAdam",
        "FusedLAMB",
        "FusedSGD",
        "AdamW8bit",
        "Adam8bit",
        "PagedAdamW",
        "PagedAdamW8bit",
        "AdaBelief",
        "Ranger",
        "Sophia",
        "SophiaG",
        "Muon",
        "Shampoo",
        "Prodigy",
        "DAdaptAdam",
        "AdamWScheduleFree",
        "SGDScheduleFree",
        "Optimizer",
    }
)
# Factory functions that return an optimizer.
_FACTORIES = frozenset(
    {
        "create_optimizer",
        "create_optimizer_v2",
        "build_optimizer",
        "make_optimizer",
        "get_optimizer",
    }
)
# Calls that hand their arguments back, wrapped, position by position.
_PASS_THROUGH = frozenset({"prepare", "setup", "initialize"})
# Annotations that say a parameter is an optimizer.
_ANNOTATIONS = frozenset(
    {"Optimizer", "OptimWrapper", "OptimizerWrapper", "AcceleratedOptimizer", "LightningOptimizer"}
)


class Optimizers(OriginWalk):
    """Which expressions of one module refer to optimizers, by their origin."""

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self.imports = ctx.get(ImportTable)
        self._unpacked: dict[int, cst.BaseExpression | None] | None = None
        self._classes: dict[str, list[cst.ClassDef]] | None = None
        self._unpacking_names: set[str] = set()

    @classmethod
    def build(cls, ctx: FileContext) -> Optimizers:
        return cls(ctx)

    def is_optimizer(self, expr: cst.BaseExpression) -> bool:
        """``expr`` refers to an optimizer, on every path that reaches it."""
        return self.follow(expr, 0) is True

    # Origins --------------------------------------------------------------------------------
    def _step(self, expr: cst.BaseExpression, depth: int) -> object:
        if isinstance(expr, cst.Call):
            return self._made_by(expr, depth)
        if isinstance(expr, cst.Name):
            bindings = self.resolver.bindings_of(expr)
            if not bindings:
                return None
            return self._agree([self._binding(expr.value, b, depth) for b in bindings])
        if isinstance(expr, cst.Attribute) and is_self_attribute(expr):
            return self._self_attribute(expr, depth)
        return None

    def _combine(self, answers: list[object]) -> object:
        """True when every path that does not loop back says optimizer; None when one is
        unknown or says otherwise."""
        return True if all(f is True for f in answers) else None

    def _made_by(self, call: cst.Call, depth: int) -> object:
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value == "prepare_optimizer":
            return True
        if isinstance(func, cst.Attribute) and func.attr.value in _PASS_THROUGH:
            positional = [a for a in call.args if a.keyword is None and not a.star]
            if len(positional) == 1:
                return self.follow(positional[0].value, depth + 1)
            return None
        for name in self.imports.qualified_names(func):
            if name.startswith(_NOT_OPTIMIZER_MODULES):
                return False
            if name.startswith(_OPTIMIZER_MODULES) or name in _TRANSFORMERS_OPTIMIZERS:
                return True
        dotted = dotted_name(func)
        if dotted is None:
            return None
        last = dotted.rsplit(".", 1)[-1]
        if last in _FACTORIES:
            return True
        local = self._local_classes().get(last, [])
        if local:
            return True if all(self._derives_from_optimizer(c) for c in local) else None
        if last in _OPTIMIZER_CLASSES and last != "Optimizer":
            return True
        return None

    def _binding(self, name: str, binding: Binding, depth: int) -> object:
        if binding.kind == "assign" and binding.value is not None:
            return self.follow(binding.value, depth + 1)
        if binding.kind == "param" and binding.param is not None:
            param = binding.param
            if param.annotation is not None and self._optimizer_annotation(
                param.annotation.annotation
            ):
                return True
            found = self._passed(binding, depth)
            return self._agree(found) if found else None
        if binding.kind == "other":
            return self._unpacked_name(name)
        return None

    # ``model, opt = accelerator.prepare(model, opt)`` -----------------------------------------
    def _unpacking(self) -> dict[int, cst.BaseExpression | None]:
        """Targets of pass-through unpackings (by id of the target node) and the argument
        passed in their position."""
        if self._unpacked is not None:
            return self._unpacked
        found: dict[int, cst.BaseExpression | None] = {}
        for node in self.ctx.nodes(cst.Assign):
            value = node.value
            if not (
                isinstance(value, cst.Call)
                and isinstance(value.func, cst.Attribute)
                and value.func.attr.value in _PASS_THROUGH
            ):
                continue
            positional = [a for a in value.args if a.keyword is None and not a.star]
            for target in node.targets:
                if not isinstance(target.target, (cst.Tuple, cst.List)):
                    continue
                elements = target.target.elements
                same = len(elements) == len(positional)
                for i, element in enumerate(elements):
                    found[id(element.value)] = positional[i].value if same else None
        self._unpacked = found
        return found

    def _unpacked_name(self, name: str) -> object:
        """True when ``name`` is unpacked from a pass-through call and every such unpacking
        passes an optimizer through (judged by the argument's own origin); the name's other
        bindings are judged by the caller."""
        if name in self._unpacking_names:
            return CYCLE
        unpacked = self._unpacking()
        self._unpacking_names.add(name)
        try:
            seen = False
            for node in self.ctx.nodes(cst.Name):
                if id(node) not in unpacked or node.value != name:
                    continue
                arg = unpacked[id(node)]
                if arg is None or self.follow(arg, 0) is not True:
                    return None
                seen = True
            return True if seen else None
        finally:
            self._unpacking_names.discard(name)

    def _more_values(self, cls: cst.ClassDef, attr: str) -> list[cst.BaseExpression | None]:
        """``self.opt`` unpacked from ``accelerator.prepare(...)`` in the class."""
        found: list[cst.BaseExpression | None] = []
        for node in self.ctx.nodes(cst.Attribute):
            if id(node) not in self._unpacking() or node.attr.value != attr:
                continue
            if not (isinstance(node.value, cst.Name) and node.value.value == "self"):
                continue
            if self.resolver.class_of_self(node) is cls:
                found.append(self._unpacking()[id(node)])
        return found

    # Classes and annotations ----------------------------------------------------------------
    def _local_classes(self) -> dict[str, list[cst.ClassDef]]:
        if self._classes is None:
            self._classes = {}
            for cls in self.ctx.nodes(cst.ClassDef):
                self._classes.setdefault(cls.name.value, []).append(cls)
        return self._classes

    def _derives_from_optimizer(self, cls: cst.ClassDef) -> bool:
        for base in cls.bases:
            names = self.imports.qualified_names(base.value)
            if any(n.startswith(_NOT_OPTIMIZER_MODULES) for n in names):
                return False
            if any(n.startswith(_OPTIMIZER_MODULES) for n in names):
                return True
            dotted = dotted_name(base.value) or ""
            if dotted.rsplit(".", 1)[-1] in _OPTIMIZER_CLASSES:
                return True
        return False

    def _optimizer_annotation(self, annotation: cst.BaseExpression) -> bool:
        if isinstance(annotation, cst.SimpleString):
            text = annotation.evaluated_value
            last = text.rsplit(".", 1)[-1] if isinstance(text, str) else ""
            return last in _ANNOTATIONS
        dotted = dotted_name(annotation)
        return dotted is not None and dotted.rsplit(".", 1)[-1] in _ANNOTATIONS
