"""The stack check (`sglforge check`, `nox -s check`): do the built wheels fit together?

Offline, CPU only, no imports of the checked packages. Four parts, one module each:

    resolution  every Requires-Dist of every built wheel resolved, exactly once, by the built
                set plus lockfiles/runtime.lock (markers for the serving Python/platform)
    api         every name SGLang's sources use from a kernel package exists in the built
                wheel that provides that package (AST on both sides; waivers in
                lockfiles/api-waivers.toml)
    labels      a wheel's base version is the release its pin names; its provenance names
                the pinned commit
    abi         the serving Python and torch match the wheels' tags, Requires-Python and
                `torch==` pins

`stack` loads what is checked, `run` runs the parts and renders the report.
"""
