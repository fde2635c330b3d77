"""EMA404: update_bn given the live model, or run before the averaged model's last update."""

from __future__ import annotations

import libcst as cst

from ..analysis.objects.apis import BoundCall
from ..analysis.syntax.origins import Origins
from ..analysis.syntax.values import ValueResolver
from ..analysis.training.swa import SwaAnalysis, SwaModel, UpdateSite
from ..diagnostics import Applicability, Edit, Fix, FixAvailability, FixScope
from ..rule import Rule


class SwaUpdateBnWrongModel(Rule):
    """
    ## What it finds
    ``torch.optim.swa_utils.update_bn`` that cannot recalibrate the averaged model:

    - it is given the live model (the one the ``AveragedModel`` averages) instead of the
      averaged model, and the averaged weights are never loaded into that live model;
    - it runs before the averaged model's last ``update_parameters``: before the epoch
      loop, or in each iteration before the update, with no ``update_bn`` after it.

    Calls through aliases (``su.update_bn``, ``swa_utils.update_bn``) and across the
    functions of the module are followed. ``update_bn(loader, swa_model.module)`` is the
    averaged model and is fine, and so is ``update_bn(loader, model)`` after
    ``model.load_state_dict(swa_model.module.state_dict())``.

    ## Why it hurts training
    ``update_bn`` resets the BatchNorm running statistics of the model it is given and
    recomputes them in one pass over the data. Given the live model, it recalibrates
    weights that are not the ones evaluated, and the averaged model keeps statistics that
    belong to no model it averages. Run before an ``update_parameters``, its work is
    undone: ``AveragedModel`` copies the live model's buffers at every update.

    ## Example
    ```python
    from torch.optim.swa_utils import AveragedModel, update_bn

    swa_model = AveragedModel(model)
    for epoch in range(100):
        train_one_epoch(model, train_loader)
        if epoch >= 75:
            swa_model.update_parameters(model)
    update_bn(train_loader, model)
    evaluate(swa_model, test_loader)
    ```

    ## Use instead
    ```python
    from torch.optim.swa_utils import AveragedModel, update_bn

    swa_model = AveragedModel(model)
    for epoch in range(100):
        train_one_epoch(model, train_loader)
        if epoch >= 75:
            swa_model.update_parameters(model)
    update_bn(train_loader, swa_model)
    evaluate(swa_model, test_loader)
    ```

    ## Fix
    Safe. For the live model: the averaged model is passed instead, spelled as the
    function holding the call refers to it. For a call before the last update: the call
    is moved after the outermost loop of the run, in the function that runs it; when the
    averaged model is also used later in the same iteration (an evaluation each epoch,
    which the call serves), the call stays and a copy is added after the loop. No fix when
    the call is in another function than that loop, or reads a variable of the loop.
    """

    code = "EMA404"
    name = "swa-update-bn-wrong-model"
    summary = "update_bn given the live model, or run before the last update_parameters"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicability = Applicability.SAFE
    fix_scope = FixScope.MOVES  # moves update_bn after the loop, or adds a call there
    triggers = (b"update_bn",)
    requires = (SwaAnalysis,)

    def finish(self) -> None:
        swa = self.ctx.get(SwaAnalysis)
        if not swa.bn_updates:
            return
        claimed: dict[int, list[SwaModel]] = {}
        for model in swa.models:
            if not model.sites:
                continue
            for bn in swa.live_bn_calls(model):
                claimed.setdefault(id(bn), []).append(model)
            self._placement(swa, model)
        for bn in swa.bn_updates:
            models = claimed.get(id(bn))
            if models and len(models) > 1:
                # Same-named live models in several functions: the average meant is the
                # one in scope at the call.
                models = [m for m in models if self._spelled_at(m, bn.call)] or models
            if models:
                self._live_model(bn, models)

    # Given the live model ----------------------------------------------------------------------
    def _live_model(self, bn: BoundCall, models: list[SwaModel]) -> None:
        arg = bn.value("model")
        assert arg is not None
        live = self._code(arg)
        names = " or ".join(m.name for m in models)
        fix = None
        if len(models) == 1:
            spelled = self._spelled_at(models[0], bn.call)
            if spelled is not None:
                fix = Fix.safe(
                    f"Recalibrate the averaged model {spelled}",
                    Edit.replace(arg, cst.parse_expression(spelled)),
                )
        self.report(
            arg,
            f"update_bn recalibrates {live}, the live model, not its average {names}: the "
            f"averaged model keeps BatchNorm statistics copied from the live weights, which "
            f"do not fit the averaged ones; pass {names}",
            fix,
        )

    def _spelled_at(self, model: SwaModel, at: cst.CSTNode) -> str | None:
        """A binding of the averaged model that is in scope at ``at``."""
        resolver = self.ctx.get(ValueResolver)
        for binding in model.obj.bindings:
            if isinstance(binding, cst.Name):
                bindings = resolver.bindings_of(binding)
                if bindings is not None and resolver.visible(binding.value, at) is bindings:
                    return binding.value
            elif (
                isinstance(binding, cst.Attribute)
                and isinstance(binding.value, cst.Name)
                and binding.value.value == "self"
            ):
                here = resolver.class_of_self(at)
                if here is not None and here is resolver.class_of_self(binding):
                    return self._code(binding)
        return None

    # Before the last update ----------------------------------------------------------------------
    def _placement(self, swa: SwaAnalysis, model: SwaModel) -> None:
        if not model.bn_calls:
            return
        placements = [swa.bn_placement(bn, model) for bn in model.bn_calls]
        if any(p != "before" for p in placements):
            return
        for bn in model.bn_calls:
            site = self._site_in_function(swa, model, bn)
            self.report(
                bn.call,
                f"update_bn on {model.name} runs before its last update_parameters: every "
                "update copies the live model's BatchNorm statistics into the average again, "
                "so the recalibration is lost by the end of training; call it after the loop",
                self._move(swa, model, bn, site) if site is not None else None,
            )

    def _site_in_function(
        self, swa: SwaAnalysis, model: SwaModel, bn: BoundCall
    ) -> UpdateSite | None:
        fn = self.ctx.index.enclosing(bn.call, cst.FunctionDef)
        for site in model.sites:
            if (
                site.outer is not None
                and self.ctx.index.enclosing(site.outer, cst.FunctionDef) is fn
            ):
                return site
        return None

    def _move(
        self, swa: SwaAnalysis, model: SwaModel, bn: BoundCall, site: UpdateSite
    ) -> Fix | None:
        index = self.ctx.index
        outer = site.outer
        assert outer is not None
        statement = index.statement(bn.call)
        if not (
            isinstance(statement, cst.SimpleStatementLine)
            and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Expr)
            and statement.body[0].value is bn.call
        ):
            return None
        if self._reads_loop_variable(bn.call, outer):
            return None
        inside = index.contains(outer, statement)
        served = inside and any(
            index.contains(outer, use.node) and index.is_before(bn.call, use.node)
            for use in swa.uses(model)
        )
        if served:
            copy = cst.SimpleStatementLine(body=statement.body)  # without its comments
            return Fix.safe("Recalibrate again after the loop", Edit.insert_after(outer, [copy]))
        return Fix.safe(
            "Move update_bn after the loop",
            Edit.remove(statement, moved=True),
            Edit.insert_after(outer, [statement]),
        )

    def _reads_loop_variable(self, call: cst.Call, outer: cst.CSTNode) -> bool:
        origins = self.ctx.get(Origins)
        targets: set[str] = set()
        for ancestor in self.ctx.index.ancestors(call):
            if isinstance(ancestor, cst.For):
                targets.update(n.value for n in origins.load_names(ancestor.target))
            if ancestor is outer:
                break
        return any(n.value in targets for n in origins.load_names(call))

    def _code(self, node: cst.CSTNode) -> str:
        return cst.Module([]).code_for_node(node).strip()
