"""What a check part reports: errors block, hints don't (lint vs hint)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Finding:
    part: str  # "resolution" | "api" | "labels" | "abi" | "waivers"
    severity: str  # "error" | "hint" | "waived" | "info"
    message: str


@dataclass
class Findings:
    items: list[Finding] = field(default_factory=list)

    def error(self, part: str, message: str) -> None:
        self.items.append(Finding(part, "error", message))

    def hint(self, part: str, message: str) -> None:
        self.items.append(Finding(part, "hint", message))

    def info(self, part: str, message: str) -> None:
        self.items.append(Finding(part, "info", message))

    def waived(self, part: str, message: str) -> None:
        self.items.append(Finding(part, "waived", message))

    def of(self, severity: str) -> list[Finding]:
        return [f for f in self.items if f.severity == severity]

    @property
    def errors(self) -> list[Finding]:
        return self.of("error")
