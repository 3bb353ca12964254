"""Module attributes of a wheel, statically: which names `import pkg.mod; pkg.mod.X` finds.

A module's names are what its source binds at top level (assignments, def/class, imports,
also inside top-level if/try/with/for blocks, but not under `if TYPE_CHECKING:`, which is
false at run time), names declared `global` in its functions, its
submodules, and re-exports: `from .x import y`, `from .x import *` (following `__all__` of
`.x` when it is a literal list, else its public names). A module whose names cannot be known
statically is *open* (any attribute passes): an extension module (.so), a PEP 562
`__getattr__`, writes through `globals()`, or `import *` from a package outside the wheel.
"""

from __future__ import annotations

import ast
import zipfile
from dataclasses import dataclass
from pathlib import Path

from sglforge.wheel.members import read_member

EXTENSION_SUFFIXES = (".so", ".pyd")
# Attributes every module object has, whatever its source says.
MODULE_DUNDERS = frozenset(
    {
        "__name__",
        "__file__",
        "__path__",
        "__doc__",
        "__spec__",
        "__loader__",
        "__package__",
        "__dict__",
        "__builtins__",
    }
)


@dataclass(frozen=True)
class ModuleNames:
    names: frozenset[str]
    open: bool  # names cannot be listed statically: every attribute is accepted


def module_name(member: str) -> tuple[str, str] | None:
    """(dotted module, kind) for a wheel member that is a module: kind "py", "pyi" or "ext"."""
    if member.endswith("/") or ".dist-info/" in member or ".data/" in member.split("/")[0]:
        return None
    parts = member.split("/")
    last = parts[-1]
    if last.endswith((".py", ".pyi")):
        kind = "pyi" if last.endswith(".pyi") else "py"
        stem = last.rsplit(".", 1)[0]
        parts = parts[:-1] if stem == "__init__" else parts[:-1] + [stem]
    elif last.endswith(EXTENSION_SUFFIXES):
        kind, parts = "ext", parts[:-1] + [last.split(".", 1)[0]]
    else:
        return None
    if not parts or not all(p.isidentifier() for p in parts):
        return None
    return ".".join(parts), kind


class WheelModules:
    """The importable modules of one wheel and, on demand, their names."""

    def __init__(self, wheel: Path, members: tuple[str, ...]) -> None:
        self.wheel = wheel
        self.sources: dict[str, str] = {}  # module → member holding its source
        self.extensions: set[str] = set()
        self.packages: set[str] = set()  # modules with submodules (incl. namespace dirs)
        for member in members:
            found = module_name(member)
            if found is None:
                continue
            module, kind = found
            if kind == "ext":
                self.extensions.add(module)
            elif kind == "py" or module not in self.sources:
                self.sources[module] = member
            parts = module.split(".")
            for i in range(1, len(parts)):
                self.packages.add(".".join(parts[:i]))
        self._names: dict[str, ModuleNames] = {}
        self._zip: zipfile.ZipFile | None = None

    @property
    def top_level(self) -> set[str]:
        return {m.split(".")[0] for m in set(self.sources) | self.extensions | self.packages}

    def is_module(self, module: str) -> bool:
        return module in self.sources or module in self.extensions or module in self.packages

    def names(self, module: str) -> ModuleNames:
        if module not in self._names:
            self._names[module] = ModuleNames(frozenset(), True)  # recursion guard: open
            self._names[module] = self._compute(module)
        return self._names[module]

    def has_attribute(self, module: str, attr: str) -> bool:
        if self.is_module(f"{module}.{attr}"):
            return True
        names = self.names(module)
        return names.open or attr in names.names or attr in MODULE_DUNDERS

    def _read(self, member: str) -> str:
        if self._zip is None:
            self._zip = zipfile.ZipFile(self.wheel)
        return read_member(self._zip, member, self.wheel, "source").decode("utf-8", "replace")

    def _compute(self, module: str) -> ModuleNames:
        if module in self.extensions and module not in self.sources:
            return ModuleNames(frozenset(), True)
        if module not in self.sources:  # namespace package: its submodules only
            return ModuleNames(frozenset(), False)
        member = self.sources[module]
        try:
            tree = ast.parse(self._read(member), filename=member)
        except SyntaxError:
            return ModuleNames(frozenset(), True)
        package = (
            module
            if member.endswith(("__init__.py", "__init__.pyi"))
            else module.rpartition(".")[0]
        )
        collector = _Binder(self, package)
        for statement in tree.body:
            collector.statement(statement)
        for node in ast.walk(tree):
            if isinstance(node, ast.Global):
                collector.names.update(node.names)
            elif _writes_globals(node):
                collector.open = True
        return ModuleNames(frozenset(collector.names), collector.open)

    def public_names(self, module: str) -> tuple[set[str], bool]:
        """What `from module import *` binds: `__all__` when literal, else public names."""
        names = self.names(module)
        declared = self._literal_all(module)
        if declared is not None:
            return declared, names.open
        return {n for n in names.names if not n.startswith("_")}, names.open

    def _literal_all(self, module: str) -> set[str] | None:
        member = self.sources.get(module)
        if member is None:
            return None
        try:
            tree = ast.parse(self._read(member))
        except SyntaxError:
            return None
        found: set[str] | None = None
        for node in tree.body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, (ast.AugAssign, ast.AnnAssign))
                else []
            )
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                try:
                    value = ast.literal_eval(node.value)
                except (ValueError, TypeError, SyntaxError):
                    return None
                if not isinstance(value, (list, tuple)):
                    return None
                found = (found or set()) | {v for v in value if isinstance(v, str)}
        return found


def _writes_globals(node: ast.AST) -> bool:
    """`globals()[k] = v` or `globals().update(...)`: names made at run time."""

    def is_globals_call(expr: ast.AST) -> bool:
        return (
            isinstance(expr, ast.Call)
            and isinstance(expr.func, ast.Name)
            and expr.func.id in ("globals", "vars")
            and not expr.args
        )

    if isinstance(node, (ast.Assign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return any(isinstance(t, ast.Subscript) and is_globals_call(t.value) for t in targets)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr in ("update", "setdefault") and is_globals_call(node.func.value)
    return False


def _is_type_checking(test: ast.expr) -> bool:
    """`if TYPE_CHECKING:` or `if typing.TYPE_CHECKING:` (false at run time)."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute)
        and test.attr == "TYPE_CHECKING"
        and isinstance(test.value, ast.Name)
        and test.value.id == "typing"
    )


class _Binder:
    """Names bound at a module's top level (entering compound statements, not functions)."""

    def __init__(self, modules: WheelModules, package: str) -> None:
        self.modules = modules
        self.package = package
        self.names: set[str] = set()
        self.open = False

    def target(self, node: ast.AST) -> None:
        if isinstance(node, ast.Name):
            self.names.add(node.id)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for element in node.elts:
                self.target(element)
        elif isinstance(node, ast.Starred):
            self.target(node.value)

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.names.add(node.name)
            if node.name == "__getattr__" and not isinstance(node, ast.ClassDef):
                self.open = True  # PEP 562: any attribute may exist
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                self.target(target)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            self.target(node.target)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                self.names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            self.import_from(node)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            self.target(node.target)
            self.block(node.body + node.orelse)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    self.target(item.optional_vars)
            self.block(node.body)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            self.block(node.orelse)  # the body runs only under a type checker
        elif isinstance(node, (ast.If, ast.While)):
            self.block(node.body + node.orelse)
        elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            self.block(node.body + node.orelse + node.finalbody)
            for handler in node.handlers:
                if handler.name:
                    self.names.add(handler.name)
                self.block(handler.body)
        elif type(node).__name__ == "Match":
            for case in node.cases:
                self.block(case.body)

    def block(self, statements: list[ast.stmt]) -> None:
        for statement in statements:
            self.statement(statement)
        for statement in statements:  # walrus at top level is rare; named exprs in tests
            for sub in ast.walk(statement) if isinstance(statement, ast.Expr) else ():
                if isinstance(sub, ast.NamedExpr):
                    self.target(sub.target)

    def import_from(self, node: ast.ImportFrom) -> None:
        source = node.module or ""
        if node.level:
            base = self.package.split(".")
            base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
            source = ".".join(base + ([node.module] if node.module else []))
        for alias in node.names:
            if alias.name != "*":
                self.names.add(alias.asname or alias.name)
                continue
            if self.modules.is_module(source):
                names, is_open = self.modules.public_names(source)
                self.names.update(names)
                self.open = self.open or is_open
            else:
                self.open = True  # `from <outside the wheel> import *`
