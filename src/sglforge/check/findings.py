"""What a check part reports, as base.findings.Finding (check = the part): errors block, hints
don't (lint vs hint); `waived` names an error a reviewed waiver turned off, `info` a count."""

from __future__ import annotations

from dataclasses import dataclass, field

from sglforge.base.findings import ERROR, HINT, Finding

WAIVED, INFO = "waived", "info"


@dataclass
class Findings:
    items: list[Finding] = field(default_factory=list)

    def error(self, part: str, message: str) -> None:
        self.items.append(Finding(part, ERROR, message))

    def hint(self, part: str, message: str) -> None:
        self.items.append(Finding(part, HINT, message))

    def info(self, part: str, message: str) -> None:
        self.items.append(Finding(part, INFO, message))

    def waived(self, part: str, message: str) -> None:
        self.items.append(Finding(part, WAIVED, message))

    def of(self, level: str) -> list[Finding]:
        return [f for f in self.items if f.level == level]

    @property
    def errors(self) -> list[Finding]:
        return self.of(ERROR)
