"""What a check says about one thing: errors that block, advice that doesn't (conda-smithy's
lint vs hint). One type for `patches lint` and the smoke doctor (and its report)."""

from __future__ import annotations

from dataclasses import dataclass

ERROR, WARNING, HINT, OK = "error", "warning", "hint", "ok"


@dataclass(frozen=True)
class Finding:
    check: str  # what was checked: a doctor check ("torch"), or a file ("patches/x/series")
    level: str  # error | warning | hint | ok
    message: str
    fix: str = ""

    def render(self) -> str:
        text = f"[{self.level:7}] {self.check}: {self.message}"
        if self.fix:
            text += f"\n          fix: {self.fix}"
        return text


def blocking(findings: list[Finding]) -> list[Finding]:
    """The findings that block (errors)."""
    return [f for f in findings if f.level == ERROR]
