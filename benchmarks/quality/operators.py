"""Mutation operators: each injects ONE weight-averaging bug, written from its description.

An operator yields ``Site``s: a description, the ``Edit`` that makes the mutant, and the
rule codes that count as finding it. Lines where a finding is expected come from the
edit's markers (nodes of the mutant) and fixed lines (edits that move no line).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import libcst as cst

from benchmarks.quality import warmup
from benchmarks.quality.cst_tools import (
    INPLACE,
    Context,
    Edit,
    block_body,
    code_text,
    components,
    dotted,
    expr_stmt_call,
    is_averaged_name,
    is_optimizer_step,
    is_update_call,
    is_update_stmt,
    last_name,
    mentions_averaged,
    number,
    pass_line,
    root_name,
    suite_statements,
    walk,
    with_body,
)


@dataclass
class Site:
    description: str
    edit: Edit


@dataclass(frozen=True)
class Operator:
    name: str
    codes: tuple[str, ...]
    family: str
    find: Callable[[Context], Iterator[Site]]
    summary: str


# --- decay values -----------------------------------------------------------------------

D_APIS = frozenset(
    {
        "ModelEma",
        "ModelEmaV2",
        "ModelEmaV3",
        "EMAModel",
        "EMA",
        "ExponentialMovingAverage",
        "ModelEMA",
        "LitEma",
        "get_ema_multi_avg_fn",
        "get_ema_avg_fn",
        "MovingAverage",
        "EMAHelper",
        "EMAHandler",
        "EMAHook",
        "ExpMomentumEMA",
        "MomentumAnnealingEMA",
        "incremental_update",
        "polyak_update",
        "soft_update",
    }
)
DECAY_WORDS = frozenset({"decay", "beta", "rate", "momentum", "tau", "polyak", "m"})
MOMENTUM_WORDS = frozenset({"momentum", "tau", "polyak", "step_size", "m"})


def _averaging_callee(call: cst.Call) -> bool:
    name = last_name(call.func)
    if name in D_APIS or is_averaged_name(name):
        return True
    if name == "dict":
        for a in call.args:
            if (
                a.keyword
                and a.keyword.value in ("type", "ema_type")
                and isinstance(a.value, cst.SimpleString)
            ):
                text = a.value.value
                if "EMA" in text or "Momentum" in text or "Averag" in text:
                    return True
    comps = set(components(name))
    return bool(comps & {"polyak", "target"} and comps & {"update"})


def _param_words(name: str) -> set[str]:
    return set(components(name)) | ({name} if name == "step_size" else set())


def decay_sites(ctx: Context) -> Iterator[tuple[cst.CSTNode, str, set[int]]]:
    """(numeric literal, parameter name, other lines that use it) for every averaging weight."""
    seen: set[int] = set()

    def out(lit: cst.CSTNode, pname: str, lines: set[int]):
        if id(lit) in seen or number(lit) is None:
            return None
        seen.add(id(lit))
        return (lit, pname, lines)

    usage: dict[str, set[int]] = {}
    for n in ctx.nodes(cst.Attribute):
        usage.setdefault(n.attr.value, set()).add(ctx.line(n))
    for n in ctx.nodes(cst.Name):
        usage.setdefault(n.value, set()).add(ctx.line(n))

    for call in ctx.nodes(cst.Call):
        fname = last_name(call.func)
        if (
            fname == "add_argument"
            and call.args
            and isinstance(call.args[0].value, cst.SimpleString)
        ):
            opt = call.args[0].value.evaluated_value
            if not isinstance(opt, str):
                continue
            comps = set(components(opt.lstrip("-")))
            if (comps & {"ema", "swa", "avg", "teacher", "moco", "target", "polyak"}) and (
                comps & DECAY_WORDS
            ):
                for a in call.args:
                    if a.keyword and a.keyword.value == "default":
                        dest = opt.lstrip("-").replace("-", "_")
                        r = out(a.value, opt.lstrip("-"), usage.get(dest, set()))
                        if r:
                            yield r
            continue
        if not _averaging_callee(call):
            for a in call.args:
                if a.keyword and a.keyword.value in (
                    "ema_momentum",
                    "ema_decay",
                    "model_ema_decay",
                    "ema_rate",
                ):
                    r = out(a.value, a.keyword.value, {ctx.line(call)})
                    if r:
                        yield r
            continue
        for i, a in enumerate(call.args):
            if a.keyword is not None:
                if (
                    _param_words(a.keyword.value) & (DECAY_WORDS | {"step_size"})
                    and a.keyword.value not in ("tau",)
                ) or (a.keyword.value == "tau" and fname != "ModelEMA"):
                    if a.keyword.value in ("type", "ema_type"):
                        continue
                    r = out(a.value, a.keyword.value, {ctx.line(call)})
                    if r:
                        yield r
            elif number(a.value) is not None and (
                (
                    i == 0
                    and fname
                    in ("get_ema_multi_avg_fn", "get_ema_avg_fn", "ExponentialMovingAverage")
                )
                or (i == 1 and fname in ("ModelEma", "ModelEmaV2", "ModelEmaV3", "EMA", "ModelEMA"))
            ):
                r = out(a.value, "decay", {ctx.line(call)})
                if r:
                    yield r
    for assign in ctx.nodes(cst.Assign):
        if len(assign.targets) != 1:
            continue
        name = last_name(assign.targets[0].target)
        comps = set(components(name))
        if (comps & {"ema", "swa", "avg", "teacher", "polyak", "target", "moco"}) and (
            comps & DECAY_WORDS
        ):
            r = out(assign.value, name, usage.get(name, set()))
            if r:
                yield r
    for param in ctx.nodes(cst.Param):
        if param.default is None or not (
            _param_words(param.name.value) & (DECAY_WORDS | {"step_size"})
        ):
            continue
        owners = [a for a in ctx.ancestors(param) if isinstance(a, (cst.FunctionDef, cst.ClassDef))]
        names = [o.name.value for o in owners]
        if any(is_averaged_name(n) or set(components(n)) & {"accumulate", "polyak"} for n in names):
            function = owners[0] if owners and isinstance(owners[0], cst.FunctionDef) else None
            if function is not None and (
                default_overridden(ctx, function, param) or transforms_gradients(ctx, function)
            ):
                continue  # an equivalent mutant (benchmarks/README.md, "Equivalent mutants")
            lines = set()
            for n in names:
                lines |= usage.get(n, set())
            r = out(param.default, param.name.value, lines)
            if r:
                yield r


# Project files' texts other than the mutated one (set by the engine, see ``mutants_of``):
# a default is reachable from another module when it names the callee.
PROJECT_TEXTS = "project_texts"


def _callee_of(ctx: Context, function: cst.FunctionDef) -> tuple[str, int] | None:
    """The name calls of ``function`` use and how many leading parameters they do not pass
    (``self``): ``C(...)`` for ``C.__init__``, ``x.m(...)`` for a method, ``f(...)``."""
    owner = next(
        (a for a in ctx.ancestors(function) if isinstance(a, (cst.FunctionDef, cst.ClassDef))),
        None,
    )
    if isinstance(owner, cst.FunctionDef):
        return None  # a nested function: its calls are not followed
    if isinstance(owner, cst.ClassDef):
        decorators = {last_name(d.decorator) for d in function.decorators}
        skip = 0 if "staticmethod" in decorators else 1
        if function.name.value == "__init__":
            return owner.name.value, skip
        return function.name.value, skip
    return function.name.value, 0


def default_overridden(ctx: Context, function: cst.FunctionDef, param: cst.Param) -> bool:
    """Every call of ``function`` in the project passes ``param`` (and there is one): its
    default is never used, so a mutant of it changes no run. Conservative: a mention of the
    callee that is not such a call (a reference, a subclass, ``partial``, ``*args``), or any
    mention in another file of the project, keeps the default reachable."""
    found = _callee_of(ctx, function)
    if found is None:
        return False
    name, skip = found
    p = function.params
    positional = [*p.posonly_params, *p.params]
    index = next((i for i, q in enumerate(positional) if q is param), None)
    keyword_only = index is None
    if not keyword_only:
        index -= skip
    calls = 0
    for node in ctx.nodes(cst.Name):
        if node.value != name:
            continue
        parent = ctx.parent(node)
        if isinstance(parent, (cst.FunctionDef, cst.ClassDef)) and parent.name is node:
            continue
        if isinstance(parent, cst.Attribute) and parent.attr is node:
            call = ctx.parent(parent)
            callee = parent
        else:
            call, callee = parent, node
        if not isinstance(call, cst.Call) or call.func is not callee:
            if _type_test(ctx, node):
                continue  # ``isinstance(x, C)``, an annotation: no instance made
            return False  # referenced, not called here
        if any(a.star for a in call.args):
            return False
        passed = any(
            a.keyword is not None and a.keyword.value == param.name.value for a in call.args
        )
        if not passed and not keyword_only:
            passed = sum(1 for a in call.args if a.keyword is None) > index
        if not passed:
            return False
        calls += 1
    if calls == 0:
        return False  # public API: every caller elsewhere uses the default
    word = re.compile(rf"\b{re.escape(name)}\b")
    return not any(word.search(text) for text in ctx.cache.get(PROJECT_TEXTS, ()))


def _type_test(ctx: Context, node: cst.Name) -> bool:
    for a in ctx.ancestors(node):
        if isinstance(a, cst.Annotation):
            return True
        if isinstance(a, cst.Call):
            return last_name(a.func) in ("isinstance", "issubclass") and a.func is not node
        if isinstance(a, cst.BaseStatement):
            return False
    return False


def transforms_gradients(ctx: Context, function: cst.FunctionDef) -> bool:
    """``function`` makes an optax-style gradient transformation (it returns a
    ``GradientTransformation*`` or is annotated so): its decays average gradient statistics,
    not weights, and a mutant of them is no weight-averaging bug."""

    def gradient_type(node: cst.CSTNode | None) -> bool:
        return node is not None and last_name(node).startswith("GradientTransformation")

    if function.returns is not None and gradient_type(function.returns.annotation):
        return True
    for node in walk(function.body):
        if (
            isinstance(node, cst.Return)
            and isinstance(node.value, cst.Call)
            and gradient_type(node.value.func)
        ):
            return True
    return False


def _ramp_equivalent(ctx: Context, lit: cst.CSTNode, old: float, new: float) -> bool:
    """The decay only ever meets a TF1-style warmup ramp ``min(d, (1 + n) / (10 + n))`` whose
    cap over the run the file sets both values reach (``warmup.equivalent``)."""
    pos = ctx.positions[lit].start
    return warmup.equivalent(
        ctx.source, ctx.cache.get(PROJECT_TEXTS, ()), ctx.cache, pos.line, pos.column, old, new
    )


def _set_decay(
    target: float | None, one_minus: bool = False
) -> Callable[[Context], Iterator[Site]]:
    def find(ctx: Context) -> Iterator[Site]:
        for lit, pname, lines in decay_sites(ctx):
            v = number(lit)
            words = _param_words(pname)
            if one_minus:
                if not words & MOMENTUM_WORDS or v is None or not 0 < v < 1:
                    continue
                new_v = 1 - v
                text = f"{new_v:.10g}"
                if "." not in text and "e" not in text:
                    text += ".0"
            else:
                if v is None or not 0.5 <= v < 1 or abs(v - target) < 1e-12:
                    continue
                if words & {"tau", "step_size"}:
                    continue
                text = repr(target)
                new_v = target
            if _ramp_equivalent(ctx, lit, v, new_v):
                continue  # an equivalent mutant (benchmarks/README.md, "Equivalent mutants")
            edit = Edit()
            new = cst.Float(text)
            edit.put(lit, new)
            edit.lines |= {ctx.line(lit)} | lines
            yield Site(f"{pname} {ctx.code(lit)} -> {text}", edit)

    return find


# --- placement: accumulation guard, optimizer step --------------------------------------


def _is_accumulation_test(ctx: Context, test: cst.CSTNode) -> bool:
    for n in walk(test):
        if isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Modulo):
            return True
        if isinstance(n, (cst.Name, cst.Attribute)):
            comps = set(components(last_name(n)))
            if (
                comps & {"accumulate", "accum", "accumulation", "sync"}
                or last_name(n) in _STEP_FLAGS
            ):
                return True
    return False


# Flags real code names the micro-batches that step by (timm's ``need_update``,
# guided-diffusion's ``took_step``, DeepSpeed's boundary test).
_STEP_FLAGS = frozenset(
    {
        "sync_gradients",
        "need_update",
        "update_grad",
        "should_step",
        "do_step",
        "took_step",
        "is_update_step",
        "is_gradient_accumulation_boundary",
        "should_update",
    }
)


def _split_update(stmts: list) -> list[int]:
    return [i for i, s in enumerate(stmts) if _holds_update(s)]


def accumulation_guard(ctx: Context) -> Iterator[Site]:
    # (a) `if step % k == 0:` / `if sync_gradients:` holding the update -> after the if
    for if_ in ctx.nodes(cst.If):
        if not _is_accumulation_test(ctx, if_.test) or not isinstance(if_.body, cst.IndentedBlock):
            continue
        body = list(if_.body.body)
        sync = "sync_gradients" in ctx.code(if_.test)
        if not sync and not any(is_optimizer_step(s) for s in body):
            continue
        for i in _split_update(body):
            upd = body[i]
            rest = body[:i] + body[i + 1 :]
            new_if = if_.with_changes(body=with_body(if_.body, rest))
            edit = Edit()
            edit.put(if_, cst.FlattenSentinel([new_if, upd]))
            edit.mark(upd)
            form = "sync_gradients" if sync else "modulo"
            yield Site(f"update out of the `if` guard ({form})", edit)
            # (b) into the `with accelerator.accumulate()` block just before the guard
            parent = ctx.block_of(if_)
            siblings = block_body(parent) if parent is not None else None
            if sync and siblings:
                k = siblings.index(if_)
                prev = siblings[k - 1] if k else None
                if (
                    isinstance(prev, cst.With)
                    and "accumulate" in ctx.code(prev.items[0])
                    and isinstance(prev.body, cst.IndentedBlock)
                ):
                    new_with = prev.with_changes(
                        body=prev.body.with_changes(body=(*prev.body.body, upd))
                    )
                    new_if2 = if_.with_changes(body=with_body(if_.body, rest))
                    new_block = list(siblings)
                    new_block[k - 1] = new_with
                    new_block[k] = new_if2
                    e2 = Edit()
                    e2.put(
                        parent,
                        with_body(parent, new_block)
                        if not isinstance(parent, cst.Module)
                        else parent.with_changes(body=new_block),
                    )
                    e2.mark(upd)
                    yield Site("update moved into the `with accelerator.accumulate()` block", e2)
    # (c) above an `if not ...: continue` that skips micro-batches
    for block, body in ctx.blocks():
        for k, s in enumerate(body):
            if not (
                isinstance(s, cst.If) and _is_accumulation_test(ctx, s.test) and s.orelse is None
            ):
                continue
            inner = suite_statements(s.body)
            if not (
                len(inner) == 1
                and isinstance(inner[0], cst.SimpleStatementLine)
                and isinstance(inner[0].body[0], cst.Continue)
            ):
                continue
            for j in range(k + 1, len(body)):
                if _holds_update(body[j]):
                    new = [*list(body[:k]), body[j], *list(body[k:j]), *list(body[j + 1 :])]
                    edit = Edit()
                    edit.put(block, block.with_changes(body=new))
                    edit.mark(body[j])
                    yield Site("update above the `if ...: continue` accumulation skip", edit)
                    break


def _step_receiver(stmt: cst.CSTNode) -> str | None:
    """The optimizer a step statement steps: ``d_optim`` of ``d_optim.step()``, ``opt`` of
    ``scaler.step(opt)``."""
    call = expr_stmt_call(stmt)
    if call is None or not isinstance(call.func, cst.Attribute):
        return None
    receiver = call.func.value
    if "scaler" in components(last_name(receiver)) and call.args:
        receiver = call.args[0].value
    return last_name(receiver) or None


def _model_names(ctx: Context, expr: cst.CSTNode, depth: int = 0) -> set[str]:
    """Models whose parameters ``expr`` reads (``generator`` in ``generator.parameters()``),
    following a name to what it was assigned once."""
    found: set[str] = set()
    for n in walk(expr):
        if (
            isinstance(n, cst.Call)
            and isinstance(n.func, cst.Attribute)
            and n.func.attr.value in ("parameters", "named_parameters")
        ):
            name = last_name(n.func.value)
            if name:
                found.add(name)
        elif isinstance(n, cst.Name) and depth == 0 and not found:
            for value in _assigned(ctx, n.value):
                found |= _model_names(ctx, value, depth + 1)
    return found


def _assigned(ctx: Context, name: str) -> list[cst.BaseExpression]:
    """The values assigned to ``name`` (``name = ...``, ``self.name = ...``) in the module."""
    key = ("assigned", name)
    if key not in ctx.cache:
        ctx.cache[key] = [
            a.value
            for a in ctx.nodes(cst.Assign)
            if any(last_name(t.target) == name for t in a.targets)
        ]
    return ctx.cache[key]


def _optimizer_models(ctx: Context, step: cst.CSTNode) -> set[str]:
    """The models an optimizer trains, from where it is made (empty: not known)."""
    name = _step_receiver(step)
    found: set[str] = set()
    if name is None:
        return found
    for value in _assigned(ctx, name):
        if isinstance(value, cst.Call):
            for arg in value.args[:1]:
                found |= _model_names(ctx, arg.value)
    return found


def _update_names(ctx: Context, stmt: cst.CSTNode) -> set[str]:
    """Names an update mentions, with the names their aliases were assigned from
    (``g_module = generator.module``)."""
    names = {n.value for n in walk(stmt) if isinstance(n, cst.Name)}
    for name in list(names):
        for value in _assigned(ctx, name):
            names |= {n.value for n in walk(value) if isinstance(n, cst.Name)}
    return names


def _trains_averaged(ctx: Context, step: cst.CSTNode, update: cst.CSTNode) -> bool:
    """The step's optimizer trains the model the update averages, or nothing says it does
    not (a discriminator's ``d_optim`` beside a generator's EMA does not)."""
    models = _optimizer_models(ctx, step)
    return not models or bool(models & _update_names(ctx, update))


def _holds_update(stmt: cst.CSTNode) -> bool:
    """An update, or an ``if``/``with`` whose own body holds one and no optimizer step
    (``if accelerator.sync_gradients: ema.step(...)``)."""
    if is_update_stmt(stmt):
        return True
    if isinstance(stmt, (cst.If, cst.With)) and not (isinstance(stmt, cst.If) and stmt.orelse):
        inner = suite_statements(stmt.body)
        return any(is_update_stmt(s) for s in inner) and not any(
            is_optimizer_step(s) for s in inner
        )
    return False


def _assigns(stmts: list) -> set[str]:
    found: set[str] = set()
    for stmt in stmts:
        for n in walk(stmt):
            if isinstance(n, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign)):
                found.add(last_name(n.target) or code_text(n.target))
    return found


def _reads_moved_over(stmt: cst.CSTNode, over: list) -> bool:
    """Moving ``stmt`` above ``over`` would read a name before it is assigned (an
    ``ema_decay = ...`` between the step and the update): not the bug this operator makes."""
    names = {n.value for n in walk(stmt) if isinstance(n, cst.Name)}
    return bool(names & _assigns(over))


def before_step(ctx: Context) -> Iterator[Site]:
    """The update (or the ``if``/``with`` holding it) moved above the step that precedes it,
    of the optimizer that trains the averaged model; also into the block that holds that
    step (``with accelerator.accumulate(model):``, ``if (i + 1) % k == 0:``)."""
    for block, body in ctx.blocks():
        for j, stmt in enumerate(body):
            if not _holds_update(stmt):
                continue
            steps = [i for i in range(j) if is_optimizer_step(body[i])]
            if steps:
                i = steps[-1]
                if not _trains_averaged(ctx, body[i], stmt) or _reads_moved_over(
                    stmt, list(body[i:j])
                ):
                    continue
                new = [*list(body[:i]), stmt, *list(body[i:j]), *list(body[j + 1 :])]
                edit = Edit()
                edit.put(block, block.with_changes(body=new))
                edit.mark(stmt)
                yield Site(f"update above `{ctx.code(body[i]).strip()}`", edit)
                continue
            # The step is in the compound statement just before: move the update into it.
            prev = body[j - 1] if j else None
            if not isinstance(prev, (cst.With, cst.If)) or not isinstance(
                prev.body, cst.IndentedBlock
            ):
                continue
            if isinstance(prev, cst.If) and prev.orelse is not None:
                continue
            inner = list(prev.body.body)
            inner_steps = [i for i, s in enumerate(inner) if is_optimizer_step(s)]
            if not inner_steps or not _trains_averaged(ctx, inner[inner_steps[-1]], stmt):
                continue
            i = inner_steps[-1]
            if _reads_moved_over(stmt, inner[i:]):
                continue
            new_prev = prev.with_changes(
                body=prev.body.with_changes(body=(*inner[:i], stmt, *inner[i:]))
            )
            new = [*list(body[: j - 1]), new_prev, *list(body[j + 1 :])]
            edit = Edit()
            edit.put(block, block.with_changes(body=new))
            edit.mark(stmt)
            yield Site(f"update moved into the block, above `{ctx.code(inner[i]).strip()}`", edit)


# --- the averaged copy: creation, eval mode, device, DDP ----------------------------------

CREATORS = frozenset({"deepcopy", "AveragedModel", "ModelEmaV2", "ModelEmaV3"})


def _creations(
    ctx: Context, kinds: frozenset = CREATORS
) -> Iterator[tuple[cst.Assign, str, cst.Call]]:
    """``X = deepcopy(...)[.chain]`` / ``X = AveragedModel(...)`` with X an averaged name."""
    for assign in ctx.nodes(cst.Assign):
        if len(assign.targets) != 1:
            continue
        name = dotted(assign.targets[0].target)
        if not is_averaged_name(name):
            continue
        call = assign.value
        inner = call
        while (
            isinstance(inner, cst.Call)
            and isinstance(inner.func, cst.Attribute)
            and last_name(inner.func) not in kinds
        ):
            inner = inner.func.value
        if isinstance(inner, cst.Call) and last_name(inner.func) in kinds:
            yield assign, name, inner


def eval_removed(ctx: Context) -> Iterator[Site]:
    done: set[str] = set()
    evalish = {
        "eval",
        "evaluate",
        "validate",
        "valid",
        "val",
        "test",
        "sample",
        "sampling",
        "generate",
        "infer",
        "predict",
        "evaluation",
        "validation",
    }
    for assign, name, _inner in _creations(ctx, frozenset({"deepcopy", "AveragedModel"})):
        if name in done:
            continue
        done.add(name)
        evals = []
        for call in ctx.nodes(cst.Call):
            f = call.func
            if isinstance(f, cst.Attribute) and (
                (f.attr.value == "eval" and not call.args)
                or (
                    f.attr.value == "train"
                    and len(call.args) == 1
                    and ctx.code(call.args[0].value) == "False"
                )
            ):
                base = dotted(f.value) or ""
                if (
                    base == name
                    or base in (f"{name}.module",)
                    or (ctx.statement(call) is ctx.statement(assign) and base.endswith("()"))
                ):
                    evals.append(call)
        if not evals:
            continue
        uses = []
        for call in ctx.nodes(cst.Call):
            fd = dotted(call.func) or ""
            if fd in (name, f"{name}.module", f"{name}.forward", f"{name}.sample") or (
                set(components(last_name(call.func))) & evalish
                and any((dotted(a.value) or "") in (name, f"{name}.module") for a in call.args)
            ):
                uses.append(call)
        if not uses:
            continue
        edit = Edit()
        for call in evals:
            stmt = ctx.statement(call)
            if expr_stmt_call(stmt) is call:
                edit.put(stmt, pass_line(stmt))
            else:
                edit.put(call, call.func.value)
        eval_stmts = {id(ctx.statement(c)) for c in evals}
        for call in uses:
            if id(ctx.statement(call)) not in eval_stmts and not any(
                id(a) in edit.replace for a in ctx.ancestors(call)
            ):
                edit.lines.add(ctx.line(call))
        edit.lines |= {ctx.line(a) for a, n, _ in _creations(ctx) if n == name}
        yield Site(f"{name}.eval() removed ({len(evals)} call(s))", edit)


def _moved_back(ctx: Context, name: str) -> bool:
    text = ctx.source
    if any(f"{name}{s}" in text for s in (".to(", ".cuda(", ".module.to(", ".module.cuda(")):
        return True
    # accelerate places what it prepares on its device
    return any(
        last_name(call.func) == "prepare" and any(dotted(a.value) == name for a in call.args)
        for call in ctx.nodes(cst.Call)
    )


ACCELERATOR_TEXT = ("cuda", "device", "accelerat", "DistributedDataParallel", "nccl")


def _trains_on_accelerator(ctx: Context, assign: cst.CSTNode) -> bool:
    """The function the copy is made in (the module, for a method) uses an accelerator: a
    copy made in a CPU-only test of a module that also has GPU tests stays where it is."""
    scope: cst.CSTNode = ctx.module
    for a in ctx.ancestors(assign):
        if isinstance(a, cst.ClassDef):
            scope = ctx.module
            break
        if isinstance(a, cst.FunctionDef):
            scope = a
    text = ctx.code(scope) if scope is not ctx.module else ctx.source
    return any(word in text for word in ACCELERATOR_TEXT)


def cpu_copy(variant: str) -> Callable[[Context], Iterator[Site]]:
    def find(ctx: Context) -> Iterator[Site]:
        if "cuda" not in ctx.source and "device" not in ctx.source:
            return
        for assign, name, inner in _creations(ctx):
            if _moved_back(ctx, name) or any(
                a.keyword and a.keyword.value == "device" for a in inner.args
            ):
                continue
            if not _trains_on_accelerator(ctx, assign):
                continue
            copied = ctx.code(inner.args[0].value) if inner.args else ""
            if last_name(inner.func) == "deepcopy" and re.search(r"state_dict|param|tree", copied):
                continue  # a copied dict or list of tensors has no .cpu()
            if (
                last_name(inner.func) == "deepcopy"
                and inner.args
                and mentions_averaged(inner.args[0].value)
            ):
                continue  # a snapshot of the average (for saving), not the average
            if variant == "cpu":
                new = cst.Call(cst.Attribute(assign.value, cst.Name("cpu")))
            else:
                new = cst.Call(
                    cst.Attribute(assign.value, cst.Name("to")),
                    [cst.Arg(cst.SimpleString('"cpu"'))],
                )
            edit = Edit()
            edit.put(assign.value, new)
            edit.lines.add(ctx.line(assign))
            yield Site(f"{name} created on the CPU ({variant})", edit)

    return find


WRAPPERS = re.compile(
    r"DistributedDataParallel|DataParallel|\bDDP\b|FullyShardedDataParallel|\bFSDP\b"
)
AVERAGING_CTORS = frozenset(
    {
        "deepcopy",
        "ModelEma",
        "ModelEmaV2",
        "ModelEmaV3",
        "ModelEMA",
        "AveragedModel",
        "EMA",
        "LitEma",
    }
)


def _ddp_assign(stmt: cst.CSTNode, name: str) -> bool:
    for n in walk(stmt):
        if (
            (
                isinstance(n, cst.Assign)
                and len(n.targets) == 1
                and dotted(n.targets[0].target) == name
            )
            and isinstance(n.value, cst.Call)
            and WRAPPERS.search(code_text(n.value.func))
        ):
            return True
    return False


def ddp_copy(ctx: Context) -> Iterator[Site]:
    if not WRAPPERS.search(ctx.source):
        return
    unwrapped: dict[str, str] = {}
    for assign in ctx.nodes(cst.Assign):
        if (
            len(assign.targets) == 1
            and isinstance(assign.value, cst.Attribute)
            and assign.value.attr.value == "module"
        ):
            base = dotted(assign.value.value)
            if base:
                unwrapped[dotted(assign.targets[0].target) or ""] = base
    for call in ctx.nodes(cst.Call):
        fname = last_name(call.func)
        if not call.args or call.args[0].keyword is not None:
            continue
        if fname not in AVERAGING_CTORS and not (is_averaged_name(fname) and fname[:1].isupper()):
            continue
        if fname == "deepcopy":
            stmt = ctx.statement(call)
            target = (
                stmt.body[0].targets[0].target
                if isinstance(stmt, cst.SimpleStatementLine)
                and isinstance(stmt.body[0], cst.Assign)
                else None
            )
            if target is None or not is_averaged_name(dotted(target)):
                continue
        arg = call.args[0].value
        new = None
        if isinstance(arg, cst.Attribute) and arg.attr.value == "module":
            new = arg.value
        elif isinstance(arg, cst.Name) and arg.value in unwrapped:
            new = cst.parse_expression(unwrapped[arg.value])
        elif (
            isinstance(arg, cst.Call)
            and last_name(arg.func) in ("unwrap_model", "de_parallel", "unwrap", "get_raw_model")
            and arg.args
        ):
            new = arg.args[0].value
        if new is not None:
            edit = Edit()
            edit.put(arg, new)
            edit.lines.add(ctx.line(call))
            yield Site(f"{fname}({ctx.code(arg)}) -> {fname}({code_text(new)})", edit)
            continue
        # creation before the DDP wrap of the same name: move it (or the `if` holding it)
        # after the statement that wraps, unless the project's class unwraps what it is
        # given (`model.module if is_parallel(model) else model`): then no bug is made
        if isinstance(arg, cst.Name) and not _class_unwraps(ctx, fname):
            site = _move_after_wrap(ctx, call, arg.value)
            if site is not None:
                yield Site(f"{fname}({arg.value}) built after the DDP wrap", site)


_UNWRAPS = re.compile(r"\.module\b|\b(?:is_parallel|de_parallel|unwrap_model|unwrap)\(")


def _class_unwraps(ctx: Context, name: str) -> bool:
    """A class ``name`` of this file or of another file of the project whose ``__init__``
    unwraps a DDP/DataParallel model before copying it: built from the wrapped model, its
    copy is still of the bare one."""
    texts = [ctx.source, *ctx.cache.get(PROJECT_TEXTS, ())]
    head = re.compile(rf"^class\s+{re.escape(name)}\b[^\n]*:", re.M)
    for text in texts:
        found = head.search(text)
        if found is None:
            continue
        body = text[found.end() :]
        init = re.search(r"def __init__\(.*?(?=\n\s*def |\nclass |\Z)", body, re.S)
        if init is not None and _UNWRAPS.search(init.group(0)):
            return True
    return False


def _move_after_wrap(ctx: Context, call: cst.Call, wrapped: str) -> Edit | None:
    stmt = ctx.statement(call)
    created = None
    if isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.Assign):
        created = dotted(stmt.body[0].targets[0].target)
    if created is None:
        return None
    moving: cst.CSTNode | None = stmt
    while moving is not None:
        block = ctx.block_of(moving)
        body = block_body(block) if block is not None else None
        if body and moving in body:
            i = body.index(moving)
            for j in range(i + 1, len(body)):
                if any(
                    isinstance(n, (cst.Name, cst.Attribute)) and dotted(n) == created
                    for n in walk(body[j])
                ):
                    break
                if _ddp_assign(body[j], wrapped):
                    new_body = [*body[:i], *body[i + 1 : j + 1], moving, *body[j + 1 :]]
                    edit = Edit()
                    edit.put(block, block.with_changes(body=new_body))
                    edit.mark(stmt)
                    return edit
        parent = ctx.parent(block) if block is not None else None
        if not isinstance(parent, (cst.If, cst.Else)):
            return None
        moving = parent if isinstance(parent, cst.If) else ctx.parent(parent)
        while isinstance(moving, (cst.If, cst.Else)) and moving not in (
            block_body(ctx.block_of(moving)) or ()
        ):
            moving = ctx.parent(moving)
    return None


# --- hand-written updates ---------------------------------------------------------------

NON_WEIGHT = frozenset(
    {
        "codebook",
        "cluster",
        "embed",
        "running",
        "bn",
        "loss",
        "stat",
        "stats",
        "grad",
        "grads",
        "sq",
    }
)


NON_WEIGHT_MODULE = ("codebook", "cluster_size", "embed_avg")


def _update_context(ctx: Context, node: cst.CSTNode) -> bool:
    key = ("update-context", id(ctx.statement(node)))
    if key not in ctx.cache:
        ctx.cache[key] = _update_context_uncached(ctx, node)
    return ctx.cache[key]


def _update_context_uncached(ctx: Context, node: cst.CSTNode) -> bool:
    if any(word in ctx.source.lower() for word in NON_WEIGHT_MODULE):
        return False  # VQ codebooks and similar: EMAs of statistics, not of weights
    stmt = ctx.statement(node)
    names = {n.value for n in walk(stmt) if isinstance(n, cst.Name)}
    if any(set(components(n)) & NON_WEIGHT for n in names):
        return False
    if mentions_averaged(stmt):
        return True
    for a in ctx.ancestors(node):
        if isinstance(a, cst.For) and (mentions_averaged(a.iter) or mentions_averaged(a.target)):
            return not any(
                set(components(n.value)) & NON_WEIGHT
                for n in walk(a.iter)
                if isinstance(n, cst.Name)
            )
        if isinstance(a, cst.FunctionDef):
            comps = set(components(a.name.value))
            return bool(comps & (set(AVERAGED_WORDS) | {"accumulate", "polyak", "moving"}))
    return False


AVERAGED_WORDS = (
    "ema",
    "swa",
    "avg",
    "averaged",
    "average",
    "shadow",
    "teacher",
    "polyak",
    "target",
    "momentum",
)


def _chain(call: cst.Call) -> list[cst.Call]:
    out = []
    node: cst.CSTNode = call
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        out.append(node)
        node = node.func.value
    return out


class _RenameCalls(cst.CSTTransformer):
    """Renames the methods of chosen calls (by identity): ``mul_`` -> ``mul``."""

    def __init__(self, names: dict[int, str]) -> None:
        self.names = names

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if id(original) in self.names:
            attr = cst.Name(self.names[id(original)])
            return updated.with_changes(func=updated.func.with_changes(attr=attr))
        return updated


def out_of_place(ctx: Context) -> Iterator[Site]:
    for stmt in ctx.nodes(cst.SimpleStatementLine):
        if len(stmt.body) != 1:
            continue
        small = stmt.body[0]
        fors = ctx.enclosing_for_targets(stmt)
        loop_vars = set().union(*(t for _, t in fors)) if fors else set()
        if isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name):
            if small.target.value in loop_vars and _update_context(ctx, small):
                op = {
                    cst.MultiplyAssign: cst.Multiply,
                    cst.AddAssign: cst.Add,
                    cst.SubtractAssign: cst.Subtract,
                }.get(type(small.operator))
                if op is None:
                    continue
                value = small.value
                if isinstance(value, cst.BinaryOperation) and op is cst.Multiply:
                    value = value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
                new = cst.Assign(
                    [cst.AssignTarget(small.target)], cst.BinaryOperation(small.target, op(), value)
                )
                edit = Edit()
                edit.put(small, new)
                edit.lines.add(ctx.line(stmt))
                yield Site(f"`{ctx.code(small)}` -> `{code_text(new)}`", edit)
            continue
        if not isinstance(small, cst.Expr) or not isinstance(small.value, cst.Call):
            continue
        chain = _chain(small.value)
        methods = [last_name(c.func) for c in chain]
        if not chain or not any(m in INPLACE for m in methods):
            continue
        root = root_name(small.value)
        if root is None or root.value not in loop_vars or not _update_context(ctx, small):
            continue
        if "copy_" in methods:
            if methods != ["copy_"] or len(chain[0].args) != 1:
                continue
            new_value = chain[0].args[0].value
            if not any(
                isinstance(n, cst.BinaryOperation) or last_name(getattr(n, "func", None)) == "lerp"
                for n in walk(new_value)
            ):
                continue  # a plain copy (buffers, initial sync) is not an averaging update
        else:
            repl = {}
            for c in chain:
                m = last_name(c.func)
                if m in INPLACE:
                    repl[id(c)] = m[:-1]

            new_value = small.value.visit(_RenameCalls(repl))
        new = cst.Assign([cst.AssignTarget(cst.Name(root.value))], new_value)
        edit = Edit()
        edit.put(small, new)
        edit.lines.add(ctx.line(stmt))
        yield Site(f"in-place update bound to `{root.value}`", edit)
        if methods == ["add_", "mul_"] or methods == ["mul_", "add_"]:
            # One call of the chain made out-of-place, the statement kept: the head
            # (``e.mul(d).add_(...)``, the temporary is updated) or the tail
            # (``e.mul_(d).add(...)``, only the scaling is kept).
            for method, what in (
                ("mul_", f"out-of-place head `{root.value}.mul(...)` of an in-place chain"),
                ("add_", f"out-of-place tail `.add(...)` after `{root.value}.mul_(...)`"),
            ):
                call = next(c for c in chain if last_name(c.func) == method)
                one = small.value.visit(_RenameCalls({id(call): method[:-1]}))
                edit = Edit()
                edit.put(small, small.with_changes(value=one))
                edit.lines.add(ctx.line(stmt))
                yield Site(what, edit)


def _is_coef(ctx: Context, node: cst.CSTNode) -> bool:
    if number(node) is not None:
        return True
    if (
        isinstance(node, cst.BinaryOperation)
        and isinstance(node.operator, cst.Subtract)
        and number(node.left) == 1
    ):
        return True
    if isinstance(node, (cst.Name, cst.Attribute)):
        comps = components(last_name(node))
        return any(c in COEFS for c in comps) or last_name(node) in ("d", "m", "mu", "lam")
    return False


COEFS = frozenset(
    {
        "decay",
        "beta",
        "alpha",
        "rate",
        "momentum",
        "tau",
        "polyak",
        "gamma",
        "factor",
        "mom",
        "keep",
        "weight",
    }
)


def _one_minus(ctx: Context, node: cst.CSTNode) -> cst.BaseExpression:
    if (
        isinstance(node, cst.BinaryOperation)
        and isinstance(node.operator, cst.Subtract)
        and number(node.left) == 1
    ):
        return (
            node.right.with_changes(lpar=[], rpar=[])
            if isinstance(node.right, cst.BinaryOperation) is False
            else node.right
        )
    inner = (
        node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        if isinstance(node, cst.BinaryOperation)
        else node
    )
    return cst.BinaryOperation(cst.Integer("1"), cst.Subtract(), inner)


def _term_coef(ctx: Context, term: cst.CSTNode) -> cst.CSTNode | None:
    if isinstance(term, cst.BinaryOperation) and isinstance(term.operator, cst.Multiply):
        lc, rc = _is_coef(ctx, term.left), _is_coef(ctx, term.right)
        if lc and not rc:
            return term.left
        if rc and not lc:
            return term.right
        if lc and rc:
            return term.left
    return None


def swapped_coefficients(ctx: Context) -> Iterator[Site]:
    done: set[int] = set()
    for call in ctx.nodes(cst.Call):
        f = call.func
        if not isinstance(f, cst.Attribute) or not _update_context(ctx, call):
            continue
        stmt = ctx.statement(call)
        if id(stmt) in done:
            continue
        m = f.attr.value
        edit = Edit()
        if (
            m in ("add_", "add")
            and isinstance(f.value, cst.Call)
            and last_name(f.value.func) in ("mul_", "mul")
            and f.value.args
        ):
            mul_arg = f.value.args[0].value
            alpha = next((a for a in call.args if a.keyword and a.keyword.value == "alpha"), None)
            if alpha is not None:
                other = alpha.value
            elif len(call.args) == 2 and _is_coef(ctx, call.args[0].value):
                other = call.args[0].value
            elif len(call.args) == 1:
                other = _term_coef(ctx, call.args[0].value)
            else:
                other = None
            if other is None or not _is_coef(ctx, mul_arg) or ctx.code(other) == ctx.code(mul_arg):
                continue
            edit.put(mul_arg, other.deep_clone())
            edit.put(other, mul_arg.deep_clone())
            edit.lines.add(ctx.line(stmt))
            done.add(id(stmt))
            yield Site(f"coefficients {ctx.code(mul_arg)} and {ctx.code(other)} swapped", edit)
        elif m == "lerp_" and len(call.args) >= 2:
            w = call.args[1].value
            edit.put(w, _one_minus(ctx, w))
            edit.lines.add(ctx.line(stmt))
            done.add(id(stmt))
            yield Site(f"lerp weight {ctx.code(w)} -> 1 - it", edit)
    for binop in ctx.nodes(cst.BinaryOperation):
        if not isinstance(binop.operator, cst.Add):
            continue
        stmt = ctx.statement(binop)
        if id(stmt) in done or not _update_context(ctx, binop):
            continue
        c1, c2 = _term_coef(ctx, binop.left), _term_coef(ctx, binop.right)
        if c1 is None or c2 is None or ctx.code(c1) == ctx.code(c2):
            continue
        parent = ctx.parent(binop)
        if isinstance(parent, cst.BinaryOperation):
            continue
        edit = Edit()
        edit.put(c1, c2.deep_clone())
        edit.put(c2, c1.deep_clone())
        edit.lines.add(ctx.line(stmt))
        done.add(id(stmt))
        yield Site(f"coefficients {ctx.code(c1)} and {ctx.code(c2)} swapped", edit)


def _frozen_shadow(ctx: Context) -> bool:
    s = ctx.source
    return (
        "requires_grad_(False)" in s or "requires_grad = False" in s or "requires_grad=False" in s
    )


def _autograd_free(ctx: Context, node: cst.CSTNode) -> bool:
    text = ctx.code(node)
    return ".data" in text or "detach" in text or "state_dict" in text or "buffers()" in text


def _inplace_stmts(node: cst.CSTNode) -> list[cst.CSTNode]:
    out = []
    for n in walk(node):
        if isinstance(n, cst.SimpleStatementLine):
            for small in n.body:
                if isinstance(small, cst.AugAssign) or (
                    isinstance(small, cst.Expr)
                    and isinstance(small.value, cst.Call)
                    and any(last_name(c.func) in INPLACE for c in _chain(small.value))
                ):
                    out.append(n)
                    break
    return out


def no_grad_removed(ctx: Context) -> Iterator[Site]:
    if _frozen_shadow(ctx):
        return
    for w in ctx.nodes(cst.With):
        idx = [i for i, it in enumerate(w.items) if (dotted(it.item) or "").endswith("no_grad()")]
        if not idx:
            continue
        stmts = [s for s in _inplace_stmts(w.body) if _update_context(ctx, s)]
        if not stmts or _autograd_free(ctx, w.body):
            continue
        edit = Edit()
        if len(w.items) == 1:
            body = suite_statements(w.body)
            if isinstance(w.body, cst.IndentedBlock):
                edit.put(w, cst.FlattenSentinel(body))
                for s in stmts:
                    edit.mark(s)
            else:
                edit.put(w, cst.FlattenSentinel(body))
                edit.mark(body[0])
        else:
            items = [it for i, it in enumerate(w.items) if i not in idx]
            items[-1] = items[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            new = w.with_changes(items=items)
            edit.put(w, new)
            edit.lines |= {ctx.line(s) for s in stmts}
        yield Site("torch.no_grad() around the update removed", edit)
    for fn in ctx.nodes(cst.FunctionDef):
        idx = [i for i, d in enumerate(fn.decorators) if "no_grad" in code_text(d.decorator)]
        if not idx:
            continue
        stmts = [s for s in _inplace_stmts(fn.body) if _update_context(ctx, s)]
        if not stmts or _autograd_free(ctx, fn.body):
            continue
        edit = Edit()
        edit.put(
            fn, fn.with_changes(decorators=[d for i, d in enumerate(fn.decorators) if i not in idx])
        )
        edit.lines |= {ctx.line(s) - 1 for s in stmts}
        yield Site(f"@no_grad removed from {fn.name.value}()", edit)


# --- SWA ----------------------------------------------------------------------------------


def _is_bn_update(call: cst.Call) -> bool:
    name = last_name(call.func)
    comps = set(components(name))
    return (
        "bn" in comps and comps & {"update", "recalibrate", "recalib", "calibrate", "fix"}
    ) or name in ("update_bn", "bn_update")


def _swa_creations(ctx: Context) -> list[cst.CSTNode]:
    out = []
    for assign in ctx.nodes(cst.Assign):
        if isinstance(assign.value, cst.Call) and last_name(assign.value.func) in (
            "AveragedModel",
            "SWA",
        ):
            out.append(assign)
        elif len(assign.targets) == 1 and isinstance(assign.value, cst.Call):
            comps = set(components(dotted(assign.targets[0].target) or ""))
            if "swa" in comps and not comps & {"scheduler", "sched", "lr", "optimizer", "start"}:
                out.append(assign)
    return out


def update_bn_removed(ctx: Context) -> Iterator[Site]:
    calls = [
        c for c in ctx.nodes(cst.Call) if _is_bn_update(c) and expr_stmt_call(ctx.statement(c)) is c
    ]
    if not calls:
        return
    edit = Edit()
    for c in calls:
        stmt = ctx.statement(c)
        edit.put(stmt, pass_line(stmt))
        edit.lines.add(ctx.line(stmt))
    for a in _swa_creations(ctx):
        edit.lines.add(ctx.line(a))
    yield Site(f"{len(calls)} BatchNorm recalibration call(s) removed", edit)


def _is_swa_start_name(name: str) -> bool:
    comps = components(name)
    return ("swa" in comps and "start" in comps) or name in ("start_averaging",)


def _swa_updates(ctx: Context) -> list[cst.Call]:
    return [
        c
        for c in ctx.nodes(cst.Call)
        if last_name(c.func) == "update_parameters"
        or (is_update_call(c) and "swa" in ctx.code(c.func).lower())
    ]


def swa_start_zero(ctx: Context) -> Iterator[Site]:
    updates = _swa_updates(ctx)
    if not updates:
        return
    lines = {ctx.line(u) for u in updates}
    for if_ in ctx.nodes(cst.If):
        if any(
            isinstance(n, (cst.Name, cst.Attribute)) and _is_swa_start_name(last_name(n))
            for n in walk(if_.test)
        ):
            lines.add(ctx.line(if_))
    seen = set()
    for call in ctx.nodes(cst.Call):
        for a in call.args:
            key = a.keyword.value if a.keyword else ""
            if (
                key == "default"
                and last_name(call.func) == "add_argument"
                and call.args
                and isinstance(call.args[0].value, cst.SimpleString)
            ):
                opt = str(call.args[0].value.evaluated_value).lstrip("-").replace("-", "_")
                key = opt if _is_swa_start_name(opt) else ""
            if (
                key
                and _is_swa_start_name(key)
                and number(a.value) not in (None, 0.0)
                and id(a.value) not in seen
            ):
                seen.add(id(a.value))
                edit = Edit()
                edit.put(a.value, cst.Integer("0"))
                edit.lines |= lines | {ctx.line(a.value)}
                yield Site(f"{key}={ctx.code(a.value)} -> 0", edit)
    for assign in ctx.nodes(cst.Assign):
        if (
            len(assign.targets) == 1
            and _is_swa_start_name(last_name(assign.targets[0].target))
            and number(assign.value) not in (None, 0.0)
        ):
            edit = Edit()
            edit.put(assign.value, cst.Integer("0"))
            edit.lines |= lines | {ctx.line(assign)}
            yield Site(f"{last_name(assign.targets[0].target)} = 0", edit)
    upd_ids = {id(ctx.statement(u)) for u in updates}
    for if_ in ctx.nodes(cst.If):
        if if_.orelse is not None or not isinstance(if_.body, cst.IndentedBlock):
            continue
        test_names = [
            last_name(n) for n in walk(if_.test) if isinstance(n, (cst.Name, cst.Attribute))
        ]
        if not any(_is_swa_start_name(n) or "start" in components(n) for n in test_names):
            continue
        inner = [s for s in walk(if_.body) if id(s) in upd_ids]
        if not inner or ctx.block_of(if_) is None:
            continue
        edit = Edit()
        edit.put(if_, cst.FlattenSentinel(list(if_.body.body)))
        for s in inner:
            edit.mark(s)
        yield Site("SWA start condition removed", edit)


def swalr_removed(ctx: Context) -> Iterator[Site]:
    updates = _swa_updates(ctx)
    if not updates:
        return
    swalr = [
        a
        for a in ctx.nodes(cst.Assign)
        if isinstance(a.value, cst.Call)
        and last_name(a.value.func) == "SWALR"
        and len(a.targets) == 1
    ]
    schedulers = {}
    for a in ctx.nodes(cst.Assign):
        if len(a.targets) == 1 and isinstance(a.value, cst.Call) and a not in swalr:
            fname = last_name(a.value.func)
            if re.search(r"LR$|Scheduler|schedule|LRScheduler", fname) and fname != "SWALR":
                schedulers[dotted(a.targets[0].target)] = a
    stepped = {
        dotted(c.func.value)
        for c in ctx.nodes(cst.Call)
        if isinstance(c.func, cst.Attribute) and c.func.attr.value == "step"
    }
    others = [n for n in schedulers if n in stepped]
    if not others:
        return
    other = others[0]
    for a in swalr:
        name = dotted(a.targets[0].target)
        refs = [n for n in ctx.nodes(cst.Attribute) + ctx.nodes(cst.Name) if dotted(n) == name]
        step_calls = [
            c
            for c in ctx.nodes(cst.Call)
            if isinstance(c.func, cst.Attribute)
            and c.func.attr.value == "step"
            and dotted(c.func.value) == name
        ]
        if not step_calls or any(expr_stmt_call(ctx.statement(c)) is not c for c in step_calls):
            continue
        if (
            len(
                [
                    r
                    for r in refs
                    if not isinstance(ctx.parent(r), cst.Attribute)
                    or ctx.parent(r).value is not r
                    or True
                ]
            )
            > len(step_calls) + 2
        ):
            continue
        edit = Edit()
        stmt = ctx.statement(a)
        edit.put(stmt, pass_line(stmt))
        for c in step_calls:
            s = ctx.statement(c)
            block = block_body(ctx.block_of(s)) or ()
            if any(
                expr_stmt_call(b) is not None and dotted(expr_stmt_call(b).func) == f"{other}.step"
                for b in block
            ):
                edit.put(s, pass_line(s))
            else:
                edit.put(
                    s, s.with_changes(body=[cst.Expr(cst.parse_expression(f"{other}.step()"))])
                )
            edit.lines.add(ctx.line(s))
        edit.lines |= {ctx.line(u) for u in updates}
        yield Site(f"SWALR {name} removed; {other} keeps stepping", edit)


OPERATORS: tuple[Operator, ...] = (
    Operator("decay-0.9", ("EMA101",), "decay", _set_decay(0.9), "decay value set to 0.9"),
    Operator(
        "decay-1.0",
        ("EMA102",),
        "decay",
        _set_decay(1.0),
        "decay value set to 1.0 (frozen average)",
    ),
    Operator(
        "decay-0.99999",
        ("EMA101", "EMA104"),
        "decay",
        _set_decay(0.99999),
        "decay value set to 0.99999",
    ),
    Operator(
        "momentum-one-minus",
        ("EMA103", "EMA102"),
        "decay",
        _set_decay(None, one_minus=True),
        "momentum-style value v set to 1 - v",
    ),
    Operator(
        "update-outside-accumulation",
        ("EMA202",),
        "placement",
        accumulation_guard,
        "update moved out of the accumulation guard",
    ),
    Operator(
        "update-before-step",
        ("EMA203",),
        "placement",
        before_step,
        "update moved above the optimizer step",
    ),
    Operator(
        "eval-removed",
        ("EMA204",),
        "placement",
        eval_removed,
        "the averaged copy's .eval() removed",
    ),
    Operator(
        "copy-on-cpu",
        ("EMA201",),
        "placement",
        cpu_copy("cpu"),
        ".cpu() appended to the averaged copy's creation",
    ),
    Operator(
        "copy-to-cpu",
        ("EMA201",),
        "placement",
        cpu_copy("to"),
        '.to("cpu") appended to the averaged copy\'s creation',
    ),
    Operator(
        "copy-of-ddp",
        ("EMA207",),
        "placement",
        ddp_copy,
        "averaged copy built from the DDP-wrapped model",
    ),
    Operator(
        "out-of-place",
        ("EMA301",),
        "hand-written",
        out_of_place,
        "in-place update made out-of-place",
    ),
    Operator(
        "coefficients-swapped",
        ("EMA302",),
        "hand-written",
        swapped_coefficients,
        "the two coefficients swapped",
    ),
    Operator(
        "no-grad-removed",
        ("EMA303",),
        "hand-written",
        no_grad_removed,
        "torch.no_grad() around the update removed",
    ),
    Operator(
        "update-bn-removed",
        ("EMA401",),
        "swa",
        update_bn_removed,
        "update_bn (or the local recalibration) removed",
    ),
    Operator(
        "swa-start-zero",
        ("EMA402",),
        "swa",
        swa_start_zero,
        "swa_start set to 0 / start condition removed",
    ),
    Operator(
        "swalr-removed",
        ("EMA403",),
        "swa",
        swalr_removed,
        "SWALR removed while another scheduler steps",
    ),
)


def by_name(name: str) -> Operator:
    for op in OPERATORS:
        if op.name == name:
            return op
    raise KeyError(name)
