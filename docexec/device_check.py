"""The device check: four mistakes that pass every CPU run and break or stall under nccl, found by reading
the code, since CI has no GPU to run it on.

1. **A CPU tensor reaches a collective.** A tensor built by a torch factory (`torch.tensor`, `zeros`,
   `empty`, `randn`, ...) without `device=` and never moved to a device (`.to(device)`, `.cuda()`; a
   tensor is moved only by reassigning it) is passed to a collective (`dist.all_reduce`, `broadcast`,
   `send`, ...). nccl takes GPU tensors only: "No backend type associated with device type cpu".
2. **A model that DDP wraps was never moved.** `DDP(model)` where the model was built without
   `.to(device)`: under nccl, DDP is built on a CPU module. torchft's `DistributedDataParallel(manager,
   model)` wraps its second argument.
3. **A clock read that does not wait for the GPU.** A function (or a class's methods, together) that
   reads a clock twice or more (`time.perf_counter`, `time.monotonic`, `time.time`) to take a duration,
   and never synchronizes (`torch.cuda.synchronize(...)`, or a call of a helper named `now`,
   `wait_for_device` or `synchronize`). CUDA returns once work is queued, so such a timer measures the
   queueing.
4. **A collective's answer read on the host at every step.** `.item()` or `.tolist()` of a tensor
   built on the device (a factory with `device=`, or moved with `.to(device)`) that a collective in the
   same function filled, inside a loop, or a call inside a loop of a function of the same file that
   does so (`stop_requested(...)` after every step). Under nccl the read waits for the GPU to finish
   all the work queued so far, so the CPU can no longer queue the next step while the GPU runs this
   one. A decision that every step needs travels as a CPU tensor on a gloo group instead. A function
   that synchronizes anyway (a timer) loses nothing more by reading; where the read every step is
   meant, a comment on its line says "waits for the GPU".

A move counts when its argument names a device: `.to(device)`, `.to(x.device)`, `.to("cuda")`,
`.to(f"cuda:{rank}")`, `.cuda()`; `.to(torch.float64)` changes the dtype and is no move.

Code that means the CPU on purpose says so in a comment with the words "on the CPU" (on the line that
builds the tensor or calls the collective or DDP, or on one of the clock reads), and the rule lets it
pass.

What it cannot see: it follows names within one function, not values across calls or attributes; a
tensor that arrives as an argument, from a DataLoader or from another module is trusted; and it knows
nothing of streams, so a GPU timer that synchronizes the wrong stream, or an all_reduce on a tensor
moved to the wrong GPU, passes.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

FACTORIES = {"tensor", "zeros", "ones", "empty", "full", "rand", "randn", "randint", "arange", "linspace", "eye"}
COLLECTIVES = {
    "all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
    "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "send", "recv", "isend", "irecv", "gather",
    "scatter",
}  # fmt: skip
CLOCKS = {"perf_counter", "monotonic", "time"}
SYNCS = {"synchronize", "now", "wait_for_device"}
HOST_READS = {"item", "tolist"}
READ_MEANT = re.compile(r"#.*\bwaits for the GPU\b")
DEVICE_WORDS = re.compile(r"device|cuda", re.I)
CPU_MEANT = re.compile(r"#.*\bon the CPU\b")


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    rule: str
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.rule}: {self.what}"


def _name(func: ast.expr) -> str:
    """The called name: `dist.all_reduce` -> 'all_reduce', `now` -> 'now'."""
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _is_torch_factory(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "torch"
        and node.func.attr in FACTORIES
        and not any(k.arg == "device" for k in node.keywords)
    )


def _is_move(node: ast.AST) -> bool:
    """`x.cuda(...)`, or `x.to(...)` with an argument that names a device (not a dtype)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return False
    if node.func.attr == "cuda":
        return True
    arguments = list(node.args) + [k.value for k in node.keywords if k.arg == "device"]
    return node.func.attr == "to" and any(DEVICE_WORDS.search(ast.unparse(a)) for a in arguments)


def _moves(expr: ast.AST) -> bool:
    return any(_is_move(n) for n in ast.walk(expr))


def _builds_on_cpu(expr: ast.AST) -> bool:
    """An expression that builds a tensor with a torch factory, no device, and no move after."""
    return any(_is_torch_factory(n) for n in ast.walk(expr)) and not _moves(expr)


def _builds_unmoved_module(expr: ast.AST) -> bool:
    """A call that builds a module (not a tensor) and does not move it."""
    return isinstance(expr, ast.Call) and not _is_torch_factory(expr) and not _moves(expr)


class _Scope:
    """The statements of one function (nested functions are scopes of their own)."""

    def __init__(self, node: ast.AST) -> None:
        self.node = node
        self.nodes = list(self._walk(node))

    @staticmethod
    def _walk(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            yield child
            yield from _Scope._walk(child)

    def assignments(self) -> dict[str, list[ast.Assign]]:
        found: dict[str, list[ast.Assign]] = {}
        for n in self.nodes:
            if isinstance(n, ast.Assign):
                for target in n.targets:
                    for t in ast.walk(target):
                        if isinstance(t, ast.Name):
                            found.setdefault(t.id, []).append(n)
        return found


def check_source(source: str, path: str = "<source>") -> list[Finding]:
    tree = ast.parse(source)
    lines = source.splitlines()

    def says_cpu(*line_numbers: int) -> bool:
        return any(CPU_MEANT.search(lines[n - 1]) for n in line_numbers if 0 < n <= len(lines))

    findings: list[Finding] = []
    scopes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for scope_node in scopes:
        scope = _Scope(scope_node)
        assigned = scope.assignments()

        def origin(expr: ast.expr, at: int, in_place: bool) -> ast.AST | None:
            """What built `expr`: itself, or for a name its last assignment before line `at`; None when
            that is unknown or the name was moved to a device in between."""
            if not isinstance(expr, ast.Name):
                return expr
            earlier = [a for a in assigned.get(expr.id, []) if a.lineno < at]
            if not earlier or _moved_later(scope, expr.id, earlier[-1].lineno, at, in_place):
                return None
            return earlier[-1].value

        for call in (n for n in scope.nodes if isinstance(n, ast.Call)):
            called = _name(call.func)
            if called in COLLECTIVES and isinstance(call.func, ast.Attribute):
                for arg in list(call.args) + [k.value for k in call.keywords]:
                    elements = arg.elts if isinstance(arg, (ast.List, ast.Tuple)) else [arg]
                    if isinstance(arg, ast.ListComp):
                        elements = [arg.elt]
                    for el in elements:
                        built = origin(el, call.lineno, in_place=False)
                        if built is not None and _builds_on_cpu(built) and not says_cpu(call.lineno, built.lineno):
                            what = f"{ast.unparse(el)} reaches {called} without a device"
                            findings.append(Finding(path, call.lineno, "cpu-tensor-in-collective", what))
            if called in {"DDP", "DistributedDataParallel"} and call.args:
                wrapped = call.args[0]
                first = origin(wrapped, call.lineno, in_place=True)
                if len(call.args) > 1 and isinstance(first, ast.Call) and _name(first.func) == "Manager":
                    wrapped = call.args[1]  # torchft's DistributedDataParallel(manager, module)
                built = origin(wrapped, call.lineno, in_place=True)
                if built is not None and _builds_unmoved_module(built) and not says_cpu(call.lineno, built.lineno):
                    what = f"DDP({ast.unparse(wrapped)}) was never moved"
                    findings.append(Finding(path, call.lineno, "unmoved-model-in-ddp", what))
    findings += _unsynchronized_clocks(tree, path, says_cpu)
    findings += _host_reads_every_step(tree, path, lines)
    return sorted(set(findings), key=lambda f: f.line)


def _on_device(expr: ast.AST) -> bool:
    """A tensor built on a device: a torch factory given `device=` that names one, or a move."""
    for n in ast.walk(expr):
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name)
            and n.func.value.id == "torch"
            and n.func.attr in FACTORIES
            and any(k.arg == "device" and DEVICE_WORDS.search(ast.unparse(k.value)) for k in n.keywords)
        ):
            return True
    return _moves(expr)


def _every_step(loop: ast.For | ast.While, steppers: set[str]) -> list[ast.Call]:
    """The calls that a training loop makes at every step: a loop whose own body (not a nested loop's)
    steps an optimizer or runs a backward pass, itself or through a function of the file that does
    (`steppers`), leaving out what sits under an `if` on a modulo (`if
    step % N == 0`: every N steps) and in nested loops (checked as loops of their own)."""

    def walk(node, gated: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.For, ast.While)):
                continue
            inner = gated or (isinstance(child, ast.If) and any(isinstance(n, ast.Mod) for n in ast.walk(child.test)))
            if isinstance(child, ast.Call):
                yield child, gated
            yield from walk(child, inner)

    calls = list(walk(loop, False))
    if not any(_name(c.func) in ("step", "backward") or _name(c.func) in steppers for c, _ in calls):
        return []
    return [c for c, gated in calls if not gated]


def _host_reads_every_step(tree: ast.Module, path: str, lines: list[str]) -> list[Finding]:
    """Rule 4: `.item()`/`.tolist()` of a device tensor in a loop, or a call in a loop of a function of
    this file that reads one."""

    def meant(line: int) -> bool:
        return 0 < line <= len(lines) and bool(READ_MEANT.search(lines[line - 1]))

    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    reads: dict[int, list[ast.Call]] = {}  # id(function) -> its host reads of device tensors
    for function in functions:
        scope = _Scope(function)
        assigned = scope.assignments()
        calls = [n for n in scope.nodes if isinstance(n, ast.Call)]
        if any(_synchronizes(c) for c in calls):  # a timer: the GPU is drained already
            continue
        collected = {  # names that a collective of this function fills
            a.id
            for c in calls
            if _name(c.func) in COLLECTIVES and isinstance(c.func, ast.Attribute)
            for a in list(c.args) + [k.value for k in c.keywords]
            if isinstance(a, ast.Name)
        }
        for call in calls:
            if not (isinstance(call.func, ast.Attribute) and call.func.attr in HOST_READS and not meant(call.lineno)):
                continue
            read = call.func.value
            if not (isinstance(read, ast.Name) and read.id in collected):
                continue
            earlier = [a for a in assigned.get(read.id, []) if a.lineno < call.lineno]
            if earlier and _on_device(earlier[-1].value):
                reads.setdefault(id(function), []).append(call)
    readers = {f.name: reads[id(f)][0] for f in functions if id(f) in reads}
    steppers = {  # functions that take one step: they step an optimizer or run a backward pass, in no loop
        f.name
        for f in functions
        if not any(isinstance(n, (ast.For, ast.While)) for n in ast.walk(f))
        and any(_name(c.func) in ("step", "backward") for c in ast.walk(f) if isinstance(c, ast.Call))
    }

    findings = []
    for function in functions:
        scope = _Scope(function)
        for loop in (n for n in scope.nodes if isinstance(n, (ast.For, ast.While))):
            for call in _every_step(loop, steppers):
                if call in reads.get(id(function), []):
                    what = f"{ast.unparse(call)} reads a device tensor on the host at every step"
                    findings.append(Finding(path, call.lineno, "host-read-every-step", what))
                elif _name(call.func) in readers and isinstance(call.func, ast.Name) and not meant(call.lineno):
                    inner = readers[_name(call.func)]
                    what = (
                        f"{_name(call.func)}() reads a device tensor on the host ({ast.unparse(inner)}, line "
                        f"{inner.lineno}) at every step"
                    )
                    findings.append(Finding(path, call.lineno, "host-read-every-step", what))
    return findings


def _moved_later(scope: _Scope, name: str, after: int, before: int, in_place: bool) -> bool:
    """`name = name.to(device)` between two lines; for a module (`in_place`), `name.to(device)` alone
    moves it too, while a tensor's `.to` returns a copy that must be assigned."""
    for n in scope.nodes:
        if not after < getattr(n, "lineno", 0) <= before:
            continue
        call = n.value if isinstance(n, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in n.targets) else (n if in_place else None)  # fmt: skip
        if (
            isinstance(call, ast.Call)
            and _is_move(call)
            and isinstance(call.func.value, ast.Name)
            and call.func.value.id == name
        ):
            return True
    return False


def _synchronizes(call: ast.Call) -> bool:
    """`torch.cuda.synchronize(...)`, or a call of a helper by its bare name (`now(device)`)."""
    if isinstance(call.func, ast.Name):
        return call.func.id in SYNCS
    return ast.unparse(call.func) == "torch.cuda.synchronize"


def _unsynchronized_clocks(tree: ast.Module, path: str, says_cpu) -> list[Finding]:
    findings = []
    # A class's methods share a timer (start in __enter__, stop in __exit__): look at them together.
    groups = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    in_class = {id(m) for c in groups for m in ast.walk(c) if isinstance(m, ast.FunctionDef)}
    groups += [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and id(n) not in in_class]
    for group in groups:
        calls = [n for n in ast.walk(group) if isinstance(n, ast.Call)]
        clocks = [
            c
            for c in calls
            if isinstance(c.func, ast.Attribute)
            and isinstance(c.func.value, ast.Name)
            and c.func.value.id == "time"
            and c.func.attr in CLOCKS
        ]
        if len(clocks) < 2 or says_cpu(*(c.lineno for c in clocks)) or any(_synchronizes(c) for c in calls):
            continue
        what = f"{group.name} takes a duration from time.{clocks[-1].func.attr}() and never synchronizes"
        findings.append(Finding(path, clocks[-1].lineno, "clock-without-synchronize", what))
    return findings


def check_file(path: Path, root: Path) -> list[Finding]:
    return check_source(path.read_text(), str(path.relative_to(root)))
