"""The serving host the stack is checked for: Python, torch, platform."""

from __future__ import annotations

from dataclasses import dataclass

from packaging import tags

# Serving hosts: x86_64 Linux with glibc up to this (Ubuntu 24.04 has 2.39); manylinux tags
# newer than this would not install there.
DEFAULT_GLIBC = (2, 39)


@dataclass(frozen=True)
class Target:
    python: str  # "3.12" (major.minor)
    torch: str | None  # "2.13.0"
    machine: str = "x86_64"
    glibc: tuple[int, int] = DEFAULT_GLIBC

    @property
    def python_tuple(self) -> tuple[int, int]:
        major, minor = self.python.split(".")[:2]
        return int(major), int(minor)

    def marker_environment(self, extra: str = "") -> dict[str, str]:
        """PEP 508 marker variables of the serving interpreter (CPython on Linux)."""
        from sglforge.wheel.runtime import marker_environment

        return {**marker_environment(self.python, self.machine), "extra": extra}

    def supported_tags(self) -> frozenset[str]:
        """Wheel tags pip would accept on the serving interpreter."""
        platforms = [
            f"manylinux_{self.glibc[0]}_{minor}_{self.machine}"
            for minor in range(self.glibc[1], 16, -1)
        ]
        platforms += [
            f"manylinux2014_{self.machine}",
            f"manylinux2010_{self.machine}",
            f"manylinux1_{self.machine}",
            f"linux_{self.machine}",
        ]
        version = self.python_tuple
        abi = f"cp{version[0]}{version[1]}"
        found = list(tags.cpython_tags(version, abis=[abi], platforms=platforms))
        found += list(tags.compatible_tags(version, interpreter=abi, platforms=platforms))
        return frozenset(str(t) for t in found)
