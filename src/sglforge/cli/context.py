"""What every verb receives: its parsed arguments, the secrets taken out of the environment,
and the settings and project they select (read when asked)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from sglforge.inputs.project import Project, find_project
from sglforge.inputs.settings import Settings, load_settings


@dataclass
class Context:
    args: argparse.Namespace
    secret_env: dict[str, str] = field(default_factory=dict)  # taken out of os.environ
    # how `sglforge VERB ...` parses its arguments (cli/main.py), for `preflight VERB ARGS`:
    # handed in, so no verb module imports the module that registers it
    parse_verb_args: Callable[..., argparse.Namespace] | None = None

    @property
    def project(self) -> Project:
        return find_project(self.args.project)

    @property
    def settings(self) -> Settings:
        return load_settings(
            self.args.config,
            environ={**os.environ, **self.secret_env},
            cache_dir=self.args.cache_dir,
            build_root=self.args.build_root,
            extra_mirrors=self.args.mirror,
            compiler_cache={  # the build verb's options (verify has none: it uses no cache)
                "kind": getattr(self.args, "compiler_cache", None),
                "remote": getattr(self.args, "compiler_cache_remote", None),
                "read_only": getattr(self.args, "compiler_cache_read_only", None),
            },
        )
