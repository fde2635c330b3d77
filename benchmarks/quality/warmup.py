"""Equivalent decay mutants under a TF1-style warmup ramp (benchmarks/README.md, "Equivalent
mutants").

A decay ``d`` used as ``min(d, (a + n) / (b + n))`` (a < b; TF1's ``ExponentialMovingAverage``
with ``num_updates``: ``min(decay, (1 + n) / (10 + n))``) never exceeds the ramp, and over a
run of ``N`` steps the ramp never exceeds ``(a + N) / (b + N)``. When the original and the
mutated value both reach that cap, ``min`` picks the ramp at every step of the run: the mutant
changes no run and is not made. A mutant that raises the decay is not made either when its
own value reaches the cap: the value never takes effect, so it makes no over-long horizon
(the run differs only where the original, lower value was in effect, now the ramp's).

The evidence must be complete, or the mutant is made as before:

- the run length comes only from values of the mutated file (``training_steps = ...``,
  ``max_steps=...``: numbers, or arithmetic over names the file binds once); every such value
  must evaluate, and the largest is taken;
- every read of the value, in the mutated file and the other files of its project, reaches
  the decay only through such a ``min``: directly, as the argument of a call whose every
  candidate callee is a function of the project that caps that parameter (a parameter
  rebound ``d = min(d, ramp)`` before any other read), or through ``self.x = value`` whose
  every read in the class does. A call dispatched by ``f = getattr(module, expr)`` has as
  candidates the project functions named by the strings of ``expr`` or by string values
  the project configures under those strings (``which_ema='tf1_ema'``).

The analysis reads Python's ``ast`` (the project's other files as text, the mutated file's
literal found by its position), independent of the libcst trees of the engine.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

# Names whose value is the length of the training run (steps or iterations). Bare
# ``num_steps``/``n_steps`` are left out: they as often count sampling or diffusion steps.
RUN_LENGTH_NAMES = frozenset(
    {
        "training_steps",
        "train_steps",
        "num_train_steps",
        "num_training_steps",
        "total_steps",
        "total_train_steps",
        "total_training_steps",
        "max_steps",
        "max_train_steps",
        "max_training_steps",
        "max_iters",
        "max_iter",
        "max_iterations",
        "total_iters",
        "total_iterations",
        "num_train_iters",
        "train_iters",
    }
)
# Calls that only hold configuration: a keyword of theirs names a value read elsewhere.
CONTAINERS = frozenset(
    {"dict", "ConfigDict", "FrozenConfigDict", "EasyDict", "Namespace", "create", "edict"}
)
MIN_CALLS = frozenset({"min", "minimum", "fmin"})
_RAMP_TEXT = re.compile(r"\b(?:f?min|minimum)\s*\(")
_DEPTH = 6


def _last(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _num(node: ast.AST) -> float | None:
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, (int, float))
        and not isinstance(node.value, bool)
    ):
        return float(node.value)
    return None


def ramp(node: ast.AST) -> tuple[float, float] | None:
    """``(a + n) / (b + n)`` (either order inside each sum) with numbers a < b: (a, b)."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)):
        return None
    sides = []
    for s in (node.left, node.right):
        if not (isinstance(s, ast.BinOp) and isinstance(s.op, ast.Add)):
            return None
        if _num(s.left) is not None and _num(s.right) is None:
            sides.append((_num(s.left), ast.dump(s.right)))
        elif _num(s.right) is not None and _num(s.left) is None:
            sides.append((_num(s.right), ast.dump(s.left)))
        else:
            return None
    (a, n1), (b, n2) = sides
    return (a, b) if n1 == n2 and 0 <= a < b else None


def ramp_min(call: ast.AST) -> tuple[ast.AST, float, float] | None:
    """``min(x, ramp)`` or ``min(ramp, x)`` (``jnp.minimum``...): (x, a, b)."""
    if not (
        isinstance(call, ast.Call)
        and _last(call.func) in MIN_CALLS
        and len(call.args) == 2
        and not call.keywords
        and not any(isinstance(a, ast.Starred) for a in call.args)
    ):
        return None
    for i in (0, 1):
        r = ramp(call.args[1 - i])
        if r is not None and ramp(call.args[i]) is None:
            return call.args[i], r[0], r[1]
    return None


@dataclass
class _Tree:
    tree: ast.Module
    parents: dict[int, ast.AST] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                self.parents[id(child)] = node

    def parent(self, node: ast.AST) -> ast.AST | None:
        return self.parents.get(id(node))

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        p = self.parent(node)
        while p is not None:
            yield p
            p = self.parent(p)


def _parse(source: str) -> _Tree | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return _Tree(ast.parse(source.removeprefix("\ufeff")))
        except (SyntaxError, ValueError, RecursionError):
            return None


FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


class Project:
    """The mutated file (first) and its project's other files, parsed with ``ast``."""

    def __init__(self, trees: list[_Tree]) -> None:
        self.trees = trees
        self.run: float | None = None
        self.functions: dict[str, list[tuple[_Tree, ast.AST]]] = {}
        self.classes: dict[str, list[tuple[_Tree, ast.ClassDef]]] = {}
        for t in trees:
            for node in ast.walk(t.tree):
                if isinstance(node, FUNCS):
                    self.functions.setdefault(node.name, []).append((t, node))
                elif isinstance(node, ast.ClassDef):
                    self.classes.setdefault(node.name, []).append((t, node))

    # -- run length --------------------------------------------------------------------

    def run_length(self) -> float | None:
        """The largest run length the mutated file sets; None when it sets none or one
        that does not evaluate."""
        t = self.trees[0]
        values: list[ast.AST] = []
        bindings: dict[str, list[ast.AST]] = {}
        for node in ast.walk(t.tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    name = _dotted(target)
                    if name is not None:
                        bindings.setdefault(name, []).append(node.value)
                    if _last(target).lower() in RUN_LENGTH_NAMES:
                        values.append(node.value)
            elif isinstance(node, ast.keyword) and (node.arg or "").lower() in RUN_LENGTH_NAMES:
                values.append(node.value)
            elif isinstance(node, ast.Dict):
                for k, v in zip(node.keys, node.values, strict=True):
                    if isinstance(k, ast.Constant) and str(k.value).lower() in RUN_LENGTH_NAMES:
                        values.append(v)
        found = []
        for v in values:
            n = _evaluate(v, bindings, 0)
            if n is None:
                return None
            found.append(n)
        best = max(found, default=None)
        return best if best is not None and best > 0 else None

    # -- reads of a value --------------------------------------------------------------

    def site_capped(self, lit: ast.AST, values: tuple[float, float], n: float) -> bool:
        """Every way the literal ``lit`` (in the mutated file) reaches a run goes through a
        ramp ``min`` whose cap both values reach."""
        t = self.trees[0]
        return self._value_ok(t, lit, values, n, 0)

    def _value_ok(self, t: _Tree, value: ast.AST, vals, n: float, depth: int) -> bool:
        if depth > _DEPTH:
            return False
        p = t.parent(value)
        if isinstance(p, ast.arguments):
            return self._default_ok(t, p, value, vals, n, depth)
        if isinstance(p, ast.keyword):
            call = t.parent(p)
            if not isinstance(call, ast.Call):
                return False
            if _last(call.func) == "add_argument":
                if p.arg != "default":
                    return False
                dest = _dest(call)
                return dest is not None and self._named_ok(dest, vals, n, depth)
            if _last(call.func) in CONTAINERS:
                return p.arg is not None and self._named_ok(p.arg, vals, n, depth)
        if isinstance(p, ast.Dict) and value in p.values:
            key = p.keys[p.values.index(value)]
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                return self._named_ok(key.value, vals, n, depth)
            return False
        if isinstance(p, (ast.Assign, ast.AnnAssign)) and p.value is value:
            targets = p.targets if isinstance(p, ast.Assign) else [p.target]
            if len(targets) != 1 or _dotted(targets[0]) is None:
                return False
            return self._named_ok(_last(targets[0]), vals, n, depth)
        return self._read_ok(t, value, vals, n, depth)

    def _read_ok(self, t: _Tree, node: ast.AST, vals, n: float, depth: int) -> bool:
        """A read of the value: it reaches the run only through a capped ramp."""
        if depth > _DEPTH:
            return False
        p = t.parent(node)
        found = ramp_min(p) if p is not None else None
        if found is not None and found[0] is node:
            _, a, b = found
            cap = (a + n) / (b + n)
            return min(vals) >= cap
        if isinstance(p, ast.keyword):
            call = t.parent(p)
            if isinstance(call, ast.Call) and p.arg is not None:
                return self._call_ok(t, call, p.arg, vals, n, depth)
            return False
        if isinstance(p, ast.Call) and node in p.args:
            i = p.args.index(node)
            if any(isinstance(a, ast.Starred) for a in p.args[: i + 1]):
                return False
            return self._call_ok(t, p, i, vals, n, depth)
        if isinstance(p, ast.Assign) and p.value is node and len(p.targets) == 1:
            target = p.targets[0]
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            ):
                cls = next((a for a in t.ancestors(p) if isinstance(a, ast.ClassDef)), None)
                return cls is not None and self._self_reads_ok(
                    t, cls, target.attr, vals, n, depth + 1
                )
            if isinstance(target, ast.Name):
                fn = next((a for a in t.ancestors(p) if isinstance(a, FUNCS)), None)
                if fn is None:
                    return False
                top = next(s for s in fn.body if s is p or any(a is s for a in t.ancestors(p)))
                rest = fn.body[fn.body.index(top) :]
                return self._scan(t, rest, target.id, vals, n, depth + 1, skip=p)
        return False

    def _call_ok(self, t: _Tree, call: ast.Call, arg: int | str, vals, n, depth) -> bool:
        candidates = self._callees(t, call)
        if not candidates:
            return False
        for ct, fn, skip in candidates:
            name = _param(fn, arg, skip)
            if name is None or not self._capped(ct, fn, name, vals, n, depth + 1):
                return False
        return True

    def _callees(self, t: _Tree, call: ast.Call) -> list[tuple[_Tree, ast.AST, int]]:
        name = _last(call.func)
        if not name:
            return []
        out = []
        if isinstance(call.func, ast.Name):
            dispatch = self._dispatch(t, call, name)
            if dispatch is not None:
                return dispatch
        for ct, fn in self.functions.get(name, []):
            out.append((ct, fn, 1 if _is_method(ct, fn) else 0))
        for ct, cls in self.classes.get(name, []):
            init = next(
                (s for s in cls.body if isinstance(s, FUNCS) and s.name == "__init__"), None
            )
            if init is None:
                return []  # an inherited constructor: not followed
            out.append((ct, init, 1))
        return out

    def _dispatch(self, t: _Tree, call: ast.Call, name: str):
        """``name = getattr(module, expr)`` in an enclosing function: the project functions
        the strings of ``expr`` (or the values configured under them) name."""
        for fn in (a for a in t.ancestors(call) if isinstance(a, FUNCS)):
            binds = [
                s
                for s in ast.walk(fn)
                if isinstance(s, ast.Assign)
                and any(isinstance(x, ast.Name) and x.id == name for x in s.targets)
            ]
            if not binds:
                continue
            if len(binds) != 1:
                return []
            value = binds[0].value
            if not (
                isinstance(value, ast.Call)
                and _last(value.func) == "getattr"
                and len(value.args) >= 2
            ):
                return []
            strings = {
                s.value
                for s in ast.walk(value.args[1])
                if isinstance(s, ast.Constant) and isinstance(s.value, str)
            }
            names = set(strings)
            for key in strings:
                names |= self._configured(key)
            out = []
            for fname in sorted(names):
                for ct, f in self.functions.get(fname, []):
                    if not _is_method(ct, f):
                        out.append((ct, f, 0))
            return out
        return None

    def _configured(self, key: str) -> set[str]:
        """String values the project sets under ``key`` (keyword, dict key, assignment)."""
        out = set()
        for t in self.trees:
            for node in ast.walk(t.tree):
                value = None
                if (isinstance(node, ast.keyword) and node.arg == key) or (
                    isinstance(node, ast.Assign) and any(_last(x) == key for x in node.targets)
                ):
                    value = node.value
                elif isinstance(node, ast.Dict):
                    for k, v in zip(node.keys, node.values, strict=True):
                        if isinstance(k, ast.Constant) and k.value == key:
                            value = v
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    out.add(value.value)
        return out

    def _capped(self, t: _Tree, fn: ast.AST, name: str, vals, n, depth) -> bool:
        return self._scan(t, fn.body, name, vals, n, depth)

    def _scan(self, t, stmts, name, vals, n, depth, skip=None) -> bool:
        """Reads of local ``name`` in ``stmts`` (in order) until a top-level rebinding."""
        if depth > _DEPTH:
            return False
        for stmt in stmts:
            for node in ast.walk(stmt):
                if (
                    isinstance(node, ast.Name)
                    and node.id == name
                    and isinstance(node.ctx, ast.Load)
                    and not self._read_ok(t, node, vals, n, depth)
                ):
                    return False
            if stmt is not skip and _rebinds(stmt, name):
                return True
        return True

    def _self_reads_ok(self, t, cls: ast.ClassDef, attr: str, vals, n, depth) -> bool:
        reads = [
            node
            for node in ast.walk(cls)
            if isinstance(node, ast.Attribute)
            and node.attr == attr
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
            and isinstance(node.ctx, ast.Load)
        ]
        return bool(reads) and all(self._read_ok(t, r, vals, n, depth) for r in reads)

    def _default_ok(self, t, args: ast.arguments, value, vals, n, depth) -> bool:
        fn = t.parent(args)
        if not isinstance(fn, FUNCS):
            return False
        positional = [*args.posonlyargs, *args.args]
        if value in args.defaults:
            param = positional[len(positional) - len(args.defaults) + args.defaults.index(value)]
        elif value in args.kw_defaults:
            param = args.kwonlyargs[args.kw_defaults.index(value)]
        else:
            return False
        return self._capped(t, fn, param.arg, vals, n, depth + 1)

    def _named_ok(self, key: str, vals, n: float, depth: int) -> bool:
        """Every read of a configuration value named ``key`` in the project is capped."""
        reads = 0
        for t in self.trees:
            for node in ast.walk(t.tree):
                read = None
                if isinstance(node, (ast.Name, ast.Attribute)) and _last(node) == key:
                    if isinstance(node.ctx, ast.Load):
                        read = node
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    if node.value != key:
                        continue
                    p = t.parent(node)
                    if isinstance(p, ast.Dict) and node in p.keys:
                        continue  # another definition
                    subscript = isinstance(p, ast.Subscript) and p.slice is node
                    get = isinstance(p, ast.Call) and _last(p.func) == "get" and p.args
                    if subscript or (get and p.args[0] is node):
                        read = p
                    else:
                        return False  # getattr(cfg, "key"), a list of names: not followed
                elif isinstance(node, ast.arg) and node.arg == key:
                    fn = t.parent(t.parent(node))
                    if not isinstance(fn, FUNCS) or not self._capped(
                        t, fn, key, vals, n, depth + 1
                    ):
                        return False  # a parameter of that name may receive it (**config)
                    reads += 1
                    continue
                if read is None:
                    continue
                if isinstance(read, ast.Subscript) and not isinstance(read.ctx, ast.Load):
                    continue
                if not self._read_ok(t, read, vals, n, depth + 1):
                    return False
                reads += 1
        return reads > 0


def _dest(call: ast.Call) -> str | None:
    for a in call.args:
        if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("--"):
            return a.value[2:].replace("-", "_")
    for k in call.keywords:
        if k.arg == "dest" and isinstance(k.value, ast.Constant):
            return str(k.value.value)
    return None


def _is_method(t: _Tree, fn: ast.AST) -> bool:
    return isinstance(t.parent(fn), ast.ClassDef) and not any(
        _last(d) == "staticmethod" for d in fn.decorator_list
    )


def _param(fn: ast.AST, arg: int | str, skip: int) -> str | None:
    a = fn.args
    if isinstance(arg, str):
        names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
        return arg if arg in names else None
    positional = [*a.posonlyargs, *a.args]
    i = arg + skip
    return positional[i].arg if i < len(positional) else None


def _rebinds(stmt: ast.AST, name: str) -> bool:
    targets = []
    if isinstance(stmt, ast.Assign):
        targets = stmt.targets
    elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        targets = [stmt.target]
    return any(isinstance(x, ast.Name) and x.id == name for x in targets)


def _evaluate(node: ast.AST, bindings: dict[str, list[ast.AST]], depth: int) -> float | None:
    if depth > 20:
        return None
    v = _num(node)
    if v is not None:
        return v
    if isinstance(node, (ast.Name, ast.Attribute)):
        values = bindings.get(_dotted(node) or "", [])
        found = {_evaluate(x, bindings, depth + 1) for x in values}
        return found.pop() if len(found) == 1 else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _evaluate(node.operand, bindings, depth + 1)
        return -v if v is not None else None
    if (
        isinstance(node, ast.Call)
        and _last(node.func) in ("int", "round", "float")
        and len(node.args) == 1
        and not node.keywords
    ):
        v = _evaluate(node.args[0], bindings, depth + 1)
        if v is None or _last(node.func) == "float":
            return v
        return float(round(v) if _last(node.func) == "round" else int(v))
    if isinstance(node, ast.BinOp):
        left = _evaluate(node.left, bindings, depth + 1)
        right = _evaluate(node.right, bindings, depth + 1)
        if left is None or right is None:
            return None
        try:
            if isinstance(node.op, ast.Add):
                return left + right
            if isinstance(node.op, ast.Sub):
                return left - right
            if isinstance(node.op, ast.Mult):
                return left * right
            if isinstance(node.op, ast.Div):
                return left / right
            if isinstance(node.op, ast.FloorDiv):
                return float(left // right)
        except (ZeroDivisionError, OverflowError):
            return None
    return None


def _literal(tree: _Tree, source: str, line: int, column: int, value: float) -> ast.AST | None:
    """The ast number at (1-based line, 0-based character column) of ``source``."""
    starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", source)]
    if source.startswith("\ufeff") or not 0 < line <= len(starts):
        return None  # a byte-order mark shifts the columns: not followed
    start = starts[line - 1]
    offset = len(source[start : start + column].encode("utf-8"))
    for node in ast.walk(tree.tree):
        if (
            isinstance(node, ast.Constant)
            and getattr(node, "lineno", None) == line
            and node.col_offset == offset
            and _num(node) == value
        ):
            return node
    return None


def project(source: str, others: Iterable[str], cache: dict) -> Project | None:
    """The parsed project of a mutated file, or None when no file of it has a ramp ``min``
    or the file sets no run length (built once per file, in ``cache``)."""
    key = "warmup_project"
    if key in cache:
        return cache[key]
    cache[key] = None
    first = _parse(source)
    if first is None:
        return None
    texts = list(others)
    if not any(_RAMP_TEXT.search(s) for s in [source, *texts]):
        return None
    trees = [first]
    for text in texts:
        t = _parse(text)
        if t is not None:
            trees.append(t)
    proj = Project(trees)
    if not any(ramp_min(n) for t in trees for n in ast.walk(t.tree)):
        return None
    proj.run = proj.run_length()
    if proj.run is None:
        return None
    cache[key] = proj
    return proj


def equivalent(
    source: str,
    others: Iterable[str],
    cache: dict,
    line: int,
    column: int,
    old: float,
    new: float,
) -> bool:
    """The decay literal at (line, column) of ``source`` (value ``old``) set to ``new``
    makes no bug: it only ever meets a warmup ramp whose cap the values reach. A mutant that
    lowers the decay needs both values at the cap (then it changes no run); one that raises
    it needs only its own value there: the value it writes never takes effect, ``min`` picks
    the ramp wherever it would, so it cannot make the over-long horizon it stands for."""
    proj = project(source, others, cache)
    if proj is None:
        return False
    lit = _literal(proj.trees[0], source, line, column, old)
    if lit is None:
        return False
    values = (new, new) if new > old else (old, new)
    return proj.site_capped(lit, values, proj.run)
