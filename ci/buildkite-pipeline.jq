# `sglforge plan --matrix` -> a Buildkite dynamic pipeline (docs/many-hosts.md):
#   nox -s matrix -- --output matrix.json
#   jq -f ci/buildkite-pipeline.jq matrix.json | buildkite-agent pipeline upload
# Buildkite orders steps by depends_on, so the DAG needs no waves: one step per missing
# recipe after the steps of the recipes it needs, then assemble, then the GPU smoke.
{steps: (
  [.build[] | {label: "build \(.recipe)", key: "build-\(.recipe)",
               command: "nox -s build -- \(.recipe) --no-check",
               depends_on: [.needs[] | "build-\(.)"]}]
  + [{label: "assemble", key: "assemble", command: "nox -s build && nox -s check",
      depends_on: [.build[] | "build-\(.recipe)"]},
     {label: "smoke", key: "smoke", command: "nox -s smoke", depends_on: ["assemble"],
      agents: {queue: "gpu"}}])}
