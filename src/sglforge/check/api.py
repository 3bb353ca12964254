"""API coherence: every name SGLang's sources use from a kernel package exists in the built
wheel that provides the package.

Uses are collected from the consumer wheel's .py files by AST (never imported): `import
deep_gemm [as dg]` then `dg.X.Y`, `from deep_gemm import X`, `from flashinfer.norm import
rmsnorm`, `import flashinfer.jit`. Aliases are per file (a name bound to a kernel module
anywhere in the file counts everywhere in it). Each dotted use is resolved against the
provider wheel (modules.py) up to its first non-module attribute.
"""

from __future__ import annotations

import ast
import re
import zipfile
from dataclasses import dataclass

from sglforge.base.requirements import canonical_name
from sglforge.check.findings import Findings
from sglforge.check.modules import WheelModules
from sglforge.check.stack import Stack, StackWheel
from sglforge.check.waivers import Alias, Waiver
from sglforge.wheel.members import read_member

PART = "api"
KERNEL_MODULES = ("deep_gemm", "sgl_kernel", "flashinfer", "tilelang", "nixl", "nixl_ep")
CONSUMER_MODULE = "sglang"


@dataclass(frozen=True)
class Use:
    file: str  # member path inside the consumer wheel
    line: int
    name: str  # dotted, starting with a kernel module


def imports_any(source: str, kernel_modules: tuple[str, ...]) -> bool:
    """Cheap pre-filter (most of SGLang's ~4,000 files import no kernel module): every alias
    comes from an `import`/`from` statement naming one at the start of a line."""
    names = "|".join(re.escape(m) for m in kernel_modules)
    pattern = rf"(?m)^[ \t]*(?:from[ \t]+(?:{names})\b|import[ \t]+[^\n#]*\b(?:{names})\b)"
    return re.search(pattern, source) is not None


def collect_uses(source: str, file: str, kernel_modules: tuple[str, ...]) -> list[Use]:
    if not imports_any(source, kernel_modules):
        return []
    try:
        tree = ast.parse(source, filename=file)
    except SyntaxError:
        return []
    aliases: dict[str, str] = {}
    uses: list[Use] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] not in kernel_modules:
                    continue
                uses.append(Use(file, node.lineno, alias.name))
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    aliases[top] = top
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module.split(".")[0] not in kernel_modules:
                continue
            for alias in node.names:
                if alias.name == "*":
                    uses.append(Use(file, node.lineno, node.module))
                    continue
                dotted = f"{node.module}.{alias.name}"
                uses.append(Use(file, node.lineno, dotted))
                aliases[alias.asname or alias.name] = dotted
    if not aliases:
        return uses
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        attrs: list[str] = []
        base: ast.AST = node
        while isinstance(base, ast.Attribute):
            attrs.append(base.attr)
            base = base.value
        if isinstance(base, ast.Name) and base.id in aliases:
            uses.append(Use(file, node.lineno, ".".join([aliases[base.id], *reversed(attrs)])))
    return uses


def resolve(modules: WheelModules, dotted: str) -> str | None:
    """None when `dotted` exists in the wheel, else the part that is missing (`pkg.mod.X`)."""
    parts = dotted.split(".")
    current = parts[0]
    if not modules.is_module(current):
        return current
    for part in parts[1:]:
        candidate = f"{current}.{part}"
        if modules.is_module(candidate):
            current = candidate
            continue
        return None if modules.has_attribute(current, part) else candidate
    return None


def find_consumer(stack: Stack, module: str) -> StackWheel | None:
    for wheel in stack.wheels:
        if any(m.startswith(f"{module}/") for m in wheel.members):
            return wheel
    return None


def check_api(
    stack: Stack,
    waivers: list[Waiver],
    findings: Findings,
    kernel_modules: tuple[str, ...] = KERNEL_MODULES,
    consumer_module: str = CONSUMER_MODULE,
    aliases: tuple[Alias, ...] = (),
) -> None:
    consumer = find_consumer(stack, consumer_module)
    if consumer is None:
        findings.hint(
            PART, f"no built wheel provides `{consumer_module}`: API coherence not checked"
        )
        return
    provider: dict[str, tuple[StackWheel, WheelModules]] = {}
    backends = {alias.provider.split(".")[0] for alias in aliases}
    for wheel in stack.wheels:
        modules = WheelModules(wheel.file, wheel.members)
        for top in modules.top_level & (set(kernel_modules) | backends):
            provider.setdefault(top, (wheel, modules))
    alias_of = {alias.module: alias.provider for alias in aliases}
    uses: list[Use] = []
    with zipfile.ZipFile(consumer.file) as archive:
        for member in consumer.members:
            if member.startswith(f"{consumer_module}/") and member.endswith(".py"):
                text = read_member(archive, member, consumer.file, "source").decode(
                    "utf-8", "replace"
                )
                uses += collect_uses(text, member, kernel_modules)
    used_waivers: set[Waiver] = set()
    reported: set[tuple[str, int, str]] = set()
    unprovided: dict[str, list[Use]] = {}
    checked = 0
    for use in sorted(uses, key=lambda u: (u.file, u.line, u.name)):
        top = use.name.split(".")[0]
        if top not in provider:
            unprovided.setdefault(top, []).append(use)
            continue
        wheel, modules = provider[top]
        checked += 1
        missing = resolve(modules, use.name)
        if missing is not None and top in alias_of:  # a meta package: its backend's names
            backend = alias_of[top] + use.name[len(top) :]
            backend_top = backend.split(".")[0]
            if backend_top in provider and resolve(provider[backend_top][1], backend) is None:
                missing = None
        if missing is None or (use.file, use.line, missing) in reported:
            continue
        reported.add((use.file, use.line, missing))
        waiver = next((w for w in waivers if w.covers(missing, use.file)), None)
        message = f"{use.file}:{use.line} uses {missing} — not in {wheel.label}"
        if waiver is not None:
            used_waivers.add(waiver)
            findings.waived(PART, f"{message} (waived: {waiver.reason})")
        else:
            findings.error(PART, message)
    locked = {pin.name for pin in stack.runtime}
    for top, module_uses in sorted(unprovided.items()):
        first = module_uses[0]
        message = (
            f"{first.file}:{first.line} uses {top} ({len(module_uses)} use(s)) — no "
            "built wheel provides module " + top
        )
        waiver = next((w for w in waivers if w.covers(top, first.file)), None)
        if canonical_name(top) in locked:
            findings.hint(
                PART,
                f"{message}; {stack.runtime_lock.name} pins a distribution "
                f"named {top}: names not checked",
            )
        elif waiver is not None:
            used_waivers.add(waiver)
            findings.waived(PART, f"{message} (waived: {waiver.reason})")
        else:
            findings.error(PART, message)
    for waiver in waivers:
        if waiver not in used_waivers:
            findings.hint(
                "waivers",
                f"waiver for {waiver.name} (line {waiver.line}) matched nothing: remove it",
            )
    findings.info(
        PART,
        f"{checked} use(s) in {consumer.label} checked against "
        + (
            ", ".join(f"{w.label} ({t})" for t, (w, _) in sorted(provider.items()))
            or "no kernel wheel"
        ),
    )
