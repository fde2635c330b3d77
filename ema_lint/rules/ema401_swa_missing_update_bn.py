"""EMA401: an SWA model used without recalibrating its BatchNorm statistics."""

from __future__ import annotations

import re

import libcst as cst

from ..analysis.objects.contrib_swa import ContribSwaOptimizers
from ..analysis.objects.norm_layers import NormLayers
from ..analysis.syntax.names import ImportTable
from ..analysis.syntax.values import ValueResolver
from ..analysis.training.batches import BatchShape
from ..analysis.training.swa import SwaAnalysis, SwaModel, UpdateSite
from ..diagnostics import Applicability, Edit, Fix, FixAvailability, FixScope
from ..rule import Rule

UPDATE_BN = "torch.optim.swa_utils.update_bn"
_TRAIN_LOADER = re.compile(r"^(train|training)_?(data)?_?(loader|dl|dataloader)$", re.IGNORECASE)
_VALIDATION = re.compile(r"(^|_)(val|valid|validation|eval|test|dev)(_|$|\d)", re.IGNORECASE)


class SwaMissingUpdateBn(Rule):
    """
    ## What it finds
    An ``AveragedModel`` that takes an equal average of the weights (SWA: no EMA
    averaging function) and does not average buffers (``use_buffers=False``, the default),
    that training updates and that is then evaluated, saved or returned, with no
    ``torch.optim.swa_utils.update_bn(loader, swa_model)`` on it after its last
    ``update_parameters``. The model, the loop, the loader and the evaluation may sit in
    different functions or methods of the module; ``swa_utils`` may be imported under any
    name.

    Silent when buffers are averaged (``use_buffers=True``), for EMA averaged models
    (``get_ema_multi_avg_fn``: an EMA of contiguous steps keeps usable statistics), for
    Lightning's ``StochasticWeightAveraging`` (it recalibrates itself), and when the module
    shows the whole model and it has no BatchNorm (only LayerNorm or GroupNorm layers, or
    none). Whether a model has BatchNorm usually cannot be seen in the file, so no evidence
    of it is needed. An ``update_bn`` given the live model instead, or placed before the
    last update, is EMA404's finding; one given a model that cannot be followed
    (``for m in models: update_bn(loader, m)``) may be this one, and keeps the rule silent.
    The module's own recalibration counts as ``update_bn`` whatever its name: a function
    that walks a parameter's ``modules()``, resets or re-weighs their BatchNorm statistics
    (``running_mean``, ``reset_running_stats()``, ``momentum``) and runs that parameter
    over a loop of batches (a copy of ``update_bn`` for dict batches, SWA's ``bn_update``).

    ## Why it hurts training
    ``AveragedModel`` averages the parameters but *copies* the buffers: after each update
    its BatchNorm running means and variances are those of the live model at that moment,
    statistics of activations that the averaged weights never produce. Evaluated like
    that, an SWA model can score far below the live one (near-chance accuracy has been
    reported), and the averaging looks useless when it is not. ``update_bn`` runs one pass
    over the training data to recompute the statistics for the averaged weights.

    ## Example
    ```python
    import torch
    from torch.optim.swa_utils import AveragedModel, SWALR

    swa_model = AveragedModel(model)
    swa_scheduler = SWALR(optimizer, swa_lr=0.05)
    for epoch in range(100):
        for x, y in train_loader:
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()
        if epoch >= 75:
            swa_model.update_parameters(model)
            swa_scheduler.step()
    torch.save(swa_model.state_dict(), "swa.pt")
    ```

    ## Use instead
    ```python
    import torch
    from torch.optim.swa_utils import AveragedModel, SWALR

    swa_model = AveragedModel(model)
    swa_scheduler = SWALR(optimizer, swa_lr=0.05)
    for epoch in range(100):
        for x, y in train_loader:
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()
        if epoch >= 75:
            swa_model.update_parameters(model)
            swa_scheduler.step()
    torch.optim.swa_utils.update_bn(train_loader, swa_model)
    torch.save(swa_model.state_dict(), "swa.pt")
    ```

    ## Shapes
    Each shape real training code uses, reported and silent: the loop, the model and the
    evaluation split across methods and helpers.

    ### The average in a trainer class, evaluated in another method
    ```python
    import torch
    from torch.optim.swa_utils import AveragedModel, SWALR


    class Trainer:
        def __init__(self, model, optimizer, train_loader, val_loader):
            self.model = model
            self.optimizer = optimizer
            self.train_loader = train_loader
            self.val_loader = val_loader
            self.swa_model = AveragedModel(model)
            self.swa_scheduler = SWALR(optimizer, swa_lr=0.05)

        def fit(self, epochs, swa_start):
            for epoch in range(epochs):
                for x, y in self.train_loader:
                    self.optimizer.zero_grad()
                    torch.nn.functional.cross_entropy(self.model(x), y).backward()
                    self.optimizer.step()
                if epoch >= swa_start:
                    self.swa_model.update_parameters(self.model)
                    self.swa_scheduler.step()
            return self.validate()

        def validate(self):
            self.swa_model.eval()
            with torch.no_grad():
                return [self.swa_model(x) for x, _ in self.val_loader]
    ```
    ```python
    import torch
    from torch.optim.swa_utils import AveragedModel, SWALR


    class Trainer:
        def __init__(self, model, optimizer, train_loader, val_loader):
            self.model = model
            self.optimizer = optimizer
            self.train_loader = train_loader
            self.val_loader = val_loader
            self.swa_model = AveragedModel(model)
            self.swa_scheduler = SWALR(optimizer, swa_lr=0.05)

        def fit(self, epochs, swa_start):
            for epoch in range(epochs):
                for x, y in self.train_loader:
                    self.optimizer.zero_grad()
                    torch.nn.functional.cross_entropy(self.model(x), y).backward()
                    self.optimizer.step()
                if epoch >= swa_start:
                    self.swa_model.update_parameters(self.model)
                    self.swa_scheduler.step()
            torch.optim.swa_utils.update_bn(self.train_loader, self.swa_model)
            return self.validate()

        def validate(self):
            self.swa_model.eval()
            with torch.no_grad():
                return [self.swa_model(x) for x, _ in self.val_loader]
    ```

    ### A per-epoch helper trains; the module recalibrates with its own function
    ```python
    import torch
    from torch.optim.swa_utils import AveragedModel, SWALR


    def train_one_epoch(model, loader, optimizer):
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()


    def main(model, optimizer, loader):
        swa_model = AveragedModel(model)
        swa_scheduler = SWALR(optimizer, swa_lr=0.05)
        for epoch in range(100):
            train_one_epoch(model, loader, optimizer)
            if epoch >= 75:
                swa_model.update_parameters(model)
                swa_scheduler.step()
        torch.save(swa_model.state_dict(), "swa.pt")
    ```
    ```python
    import torch
    from torch.optim.swa_utils import AveragedModel, SWALR


    def train_one_epoch(model, loader, optimizer):
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()


    def recalibrate_bn(loader, model):
        for module in model.modules():
            if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
                module.reset_running_stats()
                module.momentum = None
        model.train()
        with torch.no_grad():
            for x, _ in loader:
                model(x)


    def main(model, optimizer, loader):
        swa_model = AveragedModel(model)
        swa_scheduler = SWALR(optimizer, swa_lr=0.05)
        for epoch in range(100):
            train_one_epoch(model, loader, optimizer)
            if epoch >= 75:
                swa_model.update_parameters(model)
                swa_scheduler.step()
        recalibrate_bn(loader, swa_model)
        torch.save(swa_model.state_dict(), "swa.pt")
    ```

    ### A per-step hook that hands the average to the live model
    A training-framework algorithm (composer's SWA) updates the average in a hook the
    trainer calls on every batch. Loading the average into the live model in that same hook
    at ``swa_end`` lets the model train on with the averaged weights, which re-estimates
    the BatchNorm statistics: silent. Loading it when training is over (a fit-end hook,
    after the loop) is reported. Checks that the average exists (``assert swa_model is not
    None``), its resume checkpoint (``swa_model.state_dict()`` in the object's own
    ``state_dict``) and loading a checkpoint into it are not uses of its weights.
    ```python
    from torch.optim.swa_utils import AveragedModel


    class Swa:
        def on_fit_start(self, state):
            self.swa_model = AveragedModel(state.model)

        def on_batch_end(self, state):
            self.swa_model.update_parameters(state.model)

        def on_fit_end(self, state):
            state.model.load_state_dict(self.swa_model.module.state_dict())
    ```
    ```python
    from torch.optim.swa_utils import AveragedModel


    class Swa:
        def on_fit_start(self, state):
            self.swa_model = AveragedModel(state.model)

        def on_batch_end(self, state):
            self.swa_model.update_parameters(state.model)
            if state.elapsed_fraction >= self.swa_end:
                state.model.load_state_dict(self.swa_model.module.state_dict())
    ```

    ### torchcontrib's SWA optimizer, swapped into the model
    ``torchcontrib.optim.SWA`` keeps the average in the optimizer and ``swap_swa_sgd()``
    exchanges it with the model's weights; it averages no buffers either, so after the swap
    the model needs ``opt.bn_update(loader, model)`` (or ``update_bn``). Reported at the
    first swap when the module recomputes BatchNorm statistics nowhere (no ``bn_update``,
    ``update_bn`` or recalibration helper of its own or of the project); no fix is offered,
    since the model and loader the swap concerns are not named by the optimizer.
    ```python
    from torchcontrib.optim import SWA

    optimizer = SWA(base_optimizer, swa_start=160, swa_freq=5, swa_lr=0.05)
    for epoch in range(epochs):
        train_epoch(train_loader, model, optimizer)
    optimizer.swap_swa_sgd()
    evaluate(test_loader, model)
    ```
    ```python
    from torchcontrib.optim import SWA

    optimizer = SWA(base_optimizer, swa_start=160, swa_freq=5, swa_lr=0.05)
    for epoch in range(epochs):
        train_epoch(train_loader, model, optimizer)
    optimizer.swap_swa_sgd()
    optimizer.bn_update(train_loader, model)
    evaluate(test_loader, model)
    ```

    ### SWAG, sampled and evaluated
    SWA-Gaussian's ``SWAG`` (``swag.posteriors``) builds its own model from the class it is
    given; ``collect_model(model)`` adds the weights to an equal-weight running mean, and
    ``sample(scale)`` writes the mean (``sample(0.0)``) or a sample from the Gaussian into
    that model. Its BatchNorm statistics are never averaged, so each ``sample()`` must be
    followed by ``bn_update(loader, swag_model)`` (SWAG's ``utils.bn_update``, or
    ``update_bn``) before the model is used. Reported at the construction when the model
    is used after a ``sample()`` and the module recalibrates it nowhere; no fix is offered
    (the recalibration belongs after each ``sample()``). A SWAG model that is only
    collected and saved (its state is the running moments) is not reported.
    ```python
    import torch
    from swag.posteriors import SWAG

    swag_model = SWAG(type(model), no_cov_mat=False, max_num_models=20)
    for epoch in range(epochs):
        train_epoch(train_loader, model, optimizer)
        if epoch >= swa_start:
            swag_model.collect_model(model)
    swag_model.sample(0.0)
    evaluate(test_loader, swag_model)
    ```
    ```python
    import torch
    from swag import utils
    from swag.posteriors import SWAG

    swag_model = SWAG(type(model), no_cov_mat=False, max_num_models=20)
    for epoch in range(epochs):
        train_epoch(train_loader, model, optimizer)
        if epoch >= swa_start:
            swag_model.collect_model(model)
    swag_model.sample(0.0)
    utils.bn_update(train_loader, swag_model)
    evaluate(test_loader, swag_model)
    ```

    ## Fix
    Inserts ``update_bn(<loader>, <swa_model>)`` right after the outermost loop of the
    run that updates the average (the epoch loop, in the function that runs it), with
    ``device=`` when the loop moves its batches to a device (``x.to(device)``,
    ``x.cuda()``). The loader is the one that loop's batches come from, written as that
    function writes it (``train_loader`` for the ``loader`` parameter of the function
    that reads the batches).
    ``update_bn`` is spelled as the module already imports it (``update_bn``,
    ``su.update_bn``, ``swa_utils.update_bn``, ``torch.optim.swa_utils.update_bn``), or
    ``from torch.optim.swa_utils import update_bn`` is added.

    Safe when that loader is unambiguous: a single loader, whose batches are a tensor or a
    tuple with the input first (what ``update_bn`` feeds to the model). Unsafe when there
    are several loaders, when the batches are objects read by attribute, or when no loop
    over batches is visible and the loader is a training-loader name in scope. No fix for
    batches that are mappings (``update_bn`` cannot feed them), or when the average is
    updated from a hook rather than a loop.
    """

    code = "EMA401"
    name = "swa-missing-update-bn"
    summary = "SWA model used without recalibrating its BatchNorm statistics (update_bn)"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicability = Applicability.SAFE
    fix_scope = FixScope.MOVES  # inserts update_bn after the loop, and its import
    triggers = (b"AveragedModel", b"swap_swa_sgd", b"collect_model")
    requires = (SwaAnalysis, NormLayers, ContribSwaOptimizers)

    def finish(self) -> None:
        swa = self.ctx.get(SwaAnalysis)
        for model in swa.models:
            if self._needs_update_bn(swa, model):
                self._report(swa, model)
        for optimizer in self.ctx.get(ContribSwaOptimizers).unrecalibrated():
            name = optimizer.names[0] if optimizer.names else "the SWA optimizer"
            self.report(
                optimizer.swaps[0],
                f"{name}.swap_swa_sgd() puts torchcontrib's SWA average into the model, but "
                "its BatchNorm running statistics stay those of the last SGD weights (the "
                "optimizer averages no buffers) and nothing here recomputes them: the swapped "
                "model's accuracy can collapse; call "
                f"{name}.bn_update(train_loader, model) after the swap",
            )

    def _needs_update_bn(self, swa: SwaAnalysis, model: SwaModel) -> bool:
        if not model.equal or model.buffers_averaged is not False or not model.sites:
            return False
        if model.bn_calls or swa.live_bn_calls(model) or swa.unidentified_bn_calls():
            return False
        if not self._used_after(swa, model):
            return False
        source = model.obj.source
        return source is None or self.ctx.get(NormLayers).batch_norm(source) is not False

    def _used_after(self, swa: SwaAnalysis, model: SwaModel) -> bool:
        spec = model.obj.spec
        if spec is not None and spec.apply_methods:
            # SWAG: the average is in the model only once ``sample()`` has written it.
            applies = swa.applies(model)
            if not applies:
                return False
            done = {id(a.node) for a in applies}
            return any(
                id(use.node) not in done
                and use.kind not in ("registered", "attribute")
                and not use.trains_on
                for use in swa.uses(model)
            )
        return any(
            (use.kind not in ("registered", "attribute") or use.detail in ("module",))
            and not use.trains_on
            for use in swa.uses(model)
        )

    def _report(self, swa: SwaAnalysis, model: SwaModel) -> None:
        applies = swa.applies(model)
        if applies:
            # No fix: the recalibration belongs after each ``sample()``, which may run
            # inside the loop (an evaluation per epoch), not after the loop.
            method = f"{model.name}.{applies[0].detail}"
            self.report(
                model.obj.creation,
                f"{model.name} is SWAG's equal-weight average, used after {method}() with "
                "no bn_update: sample() writes the averaged (or sampled) weights into the "
                "model but leaves its BatchNorm running statistics at those of its own "
                "untrained weights (SWAG averages no buffers), so its accuracy can collapse; "
                f"call bn_update(train_loader, {model.name}) after each sample()",
            )
            return
        sites = [s for s in model.sites if s.outer is not None]
        site = max(sites, key=lambda s: self.ctx.index.order[id(s.outer)]) if sites else None
        loader = "<train loader>"
        fix: Fix | None = None
        where = ""
        if site is not None and site.outer is not None:
            fix, loader_code = self._fix(swa, model, site)
            loader = loader_code or loader
            header = self.ctx.code(site.outer).strip().splitlines()[0]
            where = f" after `{header}`"
        self.report(
            model.obj.creation,
            f"{model.name} is an equal-weight (SWA) average and is used without update_bn: "
            "AveragedModel copies BatchNorm running statistics from the live model instead "
            "of averaging them, so they belong to no model it averages and its accuracy can "
            f"collapse; call update_bn({loader}, {model.name}){where}",
            fix,
        )

    # The fix -----------------------------------------------------------------------------------
    def _fix(
        self, swa: SwaAnalysis, model: SwaModel, site: UpdateSite
    ) -> tuple[Fix | None, str | None]:
        """The fix, and the loader's code (for the message) when it is known."""
        assert site.outer is not None
        loader, safe, device = self._loader(swa, site)
        if loader is None:
            return None, None
        loader_code = self._code(loader)
        spelled = swa.spelled_at_outer(model, site)
        reference, imports = self._reference(site.outer)
        if spelled is None or reference is None:
            return None, loader_code
        args = [loader_code, self._code(spelled)]
        if device is not None:
            args.append(f"device={device}")
        call = f"{reference}({', '.join(args)})"
        statement = cst.parse_statement(call + "\n", config=self.ctx.module.config_for_parsing)
        edits = [Edit.insert_after(site.outer, [statement]), *imports]
        title = f"Recalibrate BatchNorm after the loop: {call}"
        return (Fix.safe(title, *edits) if safe else Fix.unsafe(title, *edits)), loader_code

    def _loader(
        self, swa: SwaAnalysis, site: UpdateSite
    ) -> tuple[cst.BaseExpression | None, bool, str | None]:
        """(the loader at the outer loop, whether it is certain, the device code)."""
        candidates: list[tuple[cst.BaseExpression, bool, str | None]] = []
        for batch in swa.batch_loops(site):
            if batch.loader is None:
                continue
            if batch.shape is BatchShape.MAPPING:
                return None, False, None
            loader = swa.at_outer(site, batch, batch.loader)
            if loader is None:
                continue
            device: str | None = '"cuda"' if batch.cuda else None
            if batch.device is not None:
                lifted = swa.at_outer(site, batch, batch.device)
                if lifted is None:
                    continue
                device = self._code(lifted)
            certain = batch.loaders == 1 and batch.shape is not BatchShape.UNKNOWN
            candidates.append((loader, certain, device))
        distinct = {self._code(c[0]) for c in candidates}
        if len(distinct) == 1:
            loader, certain, device = candidates[0]
            certain = certain and all(c[1] for c in candidates)
            if _VALIDATION.search(self._code(loader).split("[")[0]):
                certain = False
            return loader, certain, device
        if candidates:
            ordered = sorted(
                candidates, key=lambda c: not _TRAIN_LOADER.search(_last(self._code(c[0])))
            )
            return ordered[0][0], False, ordered[0][2]
        name = self._loader_in_scope(site)
        return (cst.Name(name), False, None) if name is not None else (None, False, None)

    def _loader_in_scope(self, site: UpdateSite) -> str | None:
        """A training-loader name bound where the outer loop is (no batch loop visible)."""
        assert site.outer is not None
        resolver = self.ctx.get(ValueResolver)
        seen: set[str] = set()
        for name in self.ctx.nodes(cst.Name):
            value = name.value
            if value in seen or not _TRAIN_LOADER.search(value):
                continue
            seen.add(value)
            if resolver.visible(value, site.outer):
                return value
        return None

    def _reference(self, at: cst.CSTNode) -> tuple[str | None, list[Edit]]:
        """How the module spells update_bn where the fix writes it, and imports to add."""
        imports = self.ctx.get(ImportTable)
        resolver = self.ctx.get(ValueResolver)
        reference = imports.local_reference(UPDATE_BN)
        if reference is not None:
            head = reference.split(".", 1)[0]
            bindings = resolver.visible(head, at)
            if bindings and all(b.kind == "import" for b in bindings):
                return reference, []
        if resolver.visible("update_bn", at):
            return None, []  # some other update_bn is in scope
        return "update_bn", [Edit.add_import("torch.optim.swa_utils", "update_bn")]

    def _code(self, node: cst.CSTNode) -> str:
        return cst.Module([]).code_for_node(node).strip()


def _last(code: str) -> str:
    return re.split(r"[.\[]", code)[-1].strip("\"']")
