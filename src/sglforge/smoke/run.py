"""The smoke pipeline: wheels → doctor → install → launch → ready → checks → report,
with teardown on every exit path (pass, failure, deadline, Ctrl-C, SIGTERM).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO

from sglforge.base.errors import SglforgeError
from sglforge.base.findings import blocking
from sglforge.base.fs import atomic_write_text, remove_tree
from sglforge.base.logs import log_tail
from sglforge.base.procgroup import (  # SIGTERM/SIGHUP to the smoke itself: like Ctrl-C
    Terminated,
    interrupt_exit,
    signals_as_exceptions,
)
from sglforge.base.steps import StepRecord, Steps
from sglforge.qualification import equivalence, qualify
from sglforge.smoke import doctor, jitstep, loaded, startup
from sglforge.smoke.checks import CheckContext, run_check
from sglforge.smoke.commands import LaunchPlan, build_launch_plan
from sglforge.smoke.environment import EnvStack, probe_environment
from sglforge.smoke.install import (
    InstallPlan,
    install,
    missing_launch_modules,
    plan_install,
    venv_base_python,
    venv_python,
)
from sglforge.smoke.processes import LaunchError, ManagedProcess, ProcessExited, ProcessSet
from sglforge.smoke.profile import SmokeProfile, Timeouts
from sglforge.smoke.readiness import NotReady, wait_all_ready, wait_ready
from sglforge.smoke.report import Failure, SmokeReport, Stage
from sglforge.wheel.wheelset import WheelSet, load_wheelset

EXIT_PASS, EXIT_FAIL = 0, 1  # interrupted: 128 + the signal (base.procgroup.interrupt_exit)


@dataclass(frozen=True)
class SmokeOptions:
    profile: SmokeProfile
    project_root: Path
    run_dir: Path
    wheels_dir: Path
    lock: Path
    reuse_venv: Path | None  # an existing venv: skip the install step (iterating on a host)
    # An existing environment's interpreter (--python, or --venv where the project has no
    # wheel set): nothing is installed and wheels/ is not read; the report records what is
    # installed there, and the doctor checks that environment.
    existing_python: Path | None = None
    tiny_model: bool = False  # generate the profile's model (`model = "tiny"`) into run_dir
    # Qualification (issue 24): record the run's greedy ids/top-k logprobs as a reference,
    # compare with one, sign the receipt; the lock the receipt binds (None with --python
    # unless --lock names the environment's lock).
    record_reference: Path | None = None
    reference: Path | None = None
    sign_key: Path | None = None
    receipt_lock: Path | None = None
    # JIT caches (issue 34, smoke/jitstep.py): an artifact to start from, a directory the
    # caches live in, and for `warm` the directory the captured artifact is written to.
    jit_cache: Path | None = None
    jit_root: Path | None = None
    warm_into: Path | None = None

    @property
    def venv(self) -> Path:
        return self.reuse_venv or self.run_dir / "venv"

    @property
    def python(self) -> Path:
        """The interpreter the servers and router run under."""
        return self.existing_python or venv_python(self.venv)

    def install_plan(self) -> InstallPlan:
        fresh = self.existing_python is None and self.reuse_venv is None
        return plan_install(
            self.venv,
            self.lock,
            self.wheels_dir,
            self.profile.install,
            venv_base_python(self.project_root) if fresh else None,
        )

    def launch_plan(self) -> LaunchPlan:
        return build_launch_plan(self.profile, self.python, self.run_dir, self.project_root)


class SmokeFailed(Exception):
    def __init__(self, failure: Failure) -> None:
        self.failure = failure
        super().__init__(failure.message)


def dry_run_text(opts: SmokeOptions) -> str:
    p = opts.profile
    lines = [
        f"# sglforge smoke --dry-run: profile {p.name} ({p.path})",
        f"# model {p.model}; transfer backend {p.backend}; run directory {opts.run_dir}",
        "# nothing below has been started",
        "",
    ]
    if opts.existing_python:
        lines.append(
            f"# stack: the existing environment of {opts.existing_python} (versions "
            "recorded in the report; wheels/ not used)"
        )
    else:
        try:
            wheelset = load_wheelset(opts.wheels_dir, opts.lock)
            lines.append(
                f"# wheels: {len(wheelset.wheels)} from {opts.wheels_dir}/manifest.json"
                f", agreeing with {opts.lock} ({len(wheelset.third_party)} third-party "
                "pins)"
            )
        except SglforgeError as exc:
            first = str(exc).splitlines()[0]
            lines.append(f"# wheels: NOT READY ({first}); a real run refuses to start")
    plan = opts.install_plan()
    lines += [
        "",
        "## 1. preflight: sglforge doctor (GPU archs, driver, torch, CUDA, ports, NUMA)",
        "",
        "## 2. install" + ("" if opts.existing_python else " into a fresh venv"),
    ]
    if opts.existing_python:
        lines.append(f"# existing environment {opts.existing_python} (--python): no install")
    elif opts.reuse_venv:
        lines.append(f"# reusing {opts.reuse_venv} (--venv): no install")
    else:
        lines += [_shell({}, plan.create), _shell(plan.env, plan.pip)]
    if opts.tiny_model:
        lines += [
            (
                f"# model: a tiny random-weight Llama generated into {p.model} "
                f"(`{opts.python} -m sglforge tiny-model {p.model} --heads {p.tiny_heads}`)"
            )
        ]
    launch = opts.launch_plan()
    lines += ["", f"## 3. launch, each in its own process group; logs in {opts.run_dir}/logs"]
    t = p.timeouts
    for command in launch.servers:
        lines += [
            "",
            f"# {command.summary}",
            command.shell(),
            (
                f"# ready: GET {command.url}/health within {t.health:g} s, then "
                f"GET {command.url}/health_generate within {t.health_generate:g} s"
            ),
        ]
    lines += [
        "",
        f"# {launch.router.summary}",
        launch.router.shell(),
        f"# ready: GET {launch.router.url}{p.router.ready_path} within {t.router:g} s",
    ]
    if launch.colocated is not None and launch.colocated_after_pair:  # issue 24
        lines += [
            "",
            f"# {launch.colocated.summary} (after the checks through the router)",
            launch.colocated.shell(),
        ]
    lines += [
        "",
        f"## 4. checks through {launch.router.url}: {', '.join(p.checks.run)}",
        (
            f"# needle lengths {list(p.checks.needle_lengths)} tokens; must recall "
            f"{list(p.checks.needle_must_recall)}; concurrency {p.checks.concurrency}"
        ),
        "",
        f"## 5. report: {opts.run_dir}/smoke-report.json and smoke-summary.txt",
        f"## 6. teardown: SIGTERM each process group, SIGKILL after {t.teardown:g} s",
    ]
    return "\n".join(lines) + "\n"


def _shell(env: dict[str, str], argv: tuple[str, ...]) -> str:
    import shlex

    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
    return (prefix + " " if prefix else "") + shlex.join(argv)


class _Stages(Steps):
    """The smoke's steps: each one goes into the report and is printed as one line."""

    def __init__(self, report: SmokeReport, out: TextIO, err: TextIO) -> None:
        super().__init__(on_end=self._ended)
        self.report = report
        self.out = out
        self.err = err

    def say(self, text: str) -> None:
        _safe_print(f"[smoke] {text}", self.out)

    def _ended(self, step: StepRecord) -> None:
        detail = "; ".join(step.detail)
        self.report.stages.append(Stage(step.name, step.ok, round(step.seconds, 3), detail))
        self.say(
            f"{step.name}: {'ok' if step.ok else 'FAILED'} ({step.seconds:.1f} s)"
            + (f" {detail}" if detail else "")
        )


def run_smoke(opts: SmokeOptions, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    profile = opts.profile
    run_dir = opts.run_dir
    started = time.monotonic()
    for stale in (
        "logs",
        "smoke-report.json",
        "smoke-summary.txt",
        "processes.json",
        "receipt.json",
        "receipt.json.sig",
    ):
        remove_tree(run_dir / stale)
    run_dir.mkdir(parents=True, exist_ok=True)
    report = SmokeReport(
        profile=profile.name,
        profile_path=str(profile.path),
        model=profile.model,
        backend=profile.backend,
        run_dir=str(run_dir),
    )
    qual = qualify.RunFacts()
    steps = _Stages(report, out, err)
    processes = ProcessSet(grace=profile.timeouts.teardown)
    code = EXIT_FAIL
    try:
        with signals_as_exceptions():
            try:
                code = _pipeline(opts, report, steps, processes, qual)
            finally:
                # Tear down before any printing: output can fail (a closed pipe) and must
                # never stand between us and GPUs held by orphaned servers.
                if processes.processes:
                    result = processes.teardown()
                    report.teardown = {
                        **report.teardown,
                        "signalled": result.signalled,
                        "survivors": result.survivors,
                        "seconds": round(result.seconds, 3),
                    }
                    steps.say(f"teardown: {result.signalled} in {result.seconds:.1f} s")
                    if result.survivors:
                        code = EXIT_FAIL
                        _safe_print(f"error: processes survived teardown: {result.survivors}", err)
    except (KeyboardInterrupt, Terminated) as exc:
        code, name = interrupt_exit(exc)  # the shell convention 128 + signal number
        report.result = "interrupted"
        report.failure = Failure(
            "interrupted", f"interrupted by {name}; all process groups were torn down"
        )
    except SmokeFailed as exc:
        report.failure = exc.failure
        code = EXIT_FAIL
        _print_failure(exc.failure, err)
    code = _pack_warm(opts, report, code, steps)
    if report.result == "running":
        report.result = "pass" if code == EXIT_PASS else "fail"
    report_path, summary_path = report.write(run_dir)
    receipt_line = ""
    try:
        receipt = qualify.write_run_receipt(opts, report, qual, time.monotonic() - started)
        receipt_line = f"\nreceipt: {receipt}" + (" (signed)" if opts.sign_key else "")
    except SglforgeError as exc:  # the report stands; a receipt that cannot be made fails
        _safe_print(f"error: no receipt: {exc}", err)
        code = EXIT_FAIL if code == EXIT_PASS else code
    _safe_print(
        "\n" + report.summary_text() + f"\nreport: {report_path}\nsummary: "
        f"{summary_path}" + receipt_line,
        out,
    )
    return code


def _safe_print(text: str, stream: TextIO) -> None:
    """Print, ignoring a closed or broken output stream (`sglforge smoke | head`)."""
    try:
        print(text, file=stream, flush=True)
    except (OSError, ValueError):
        pass


def _print_failure(failure: Failure, err: TextIO) -> None:
    who = f"{failure.process} ({failure.exit})" if failure.process else failure.stage
    lines = [f"error: smoke failed in {failure.stage}: {failure.message}"]
    if failure.log_tail is not None:
        lines += [
            f"--- last lines of {who} log {failure.log} ---",
            failure.log_tail,
            "--- end of log ---",
        ]
    _safe_print("\n".join(lines), err)


@dataclass(frozen=True)
class _Stack:
    """What the servers run on: the project's wheel set, or an existing environment."""

    wheelset: WheelSet | None = None
    env: EnvStack | None = None


@dataclass
class _Checked:
    """The outcome of the checks step: the enforced checks that failed, and the pair's
    equivalence answers when the colocated server only starts after the pair."""

    failed: list[str]
    pair_answers: list | None = None


def _pipeline(
    opts: SmokeOptions,
    report: SmokeReport,
    steps: _Stages,
    processes: ProcessSet,
    qual: qualify.RunFacts,
) -> int:
    """The smoke's steps in order; the exit status (a failure raises SmokeFailed)."""
    _read_qualification_inputs(opts, qual)
    if opts.existing_python:
        stack = _Stack(env=_probe_existing_environment(opts, report, steps, qual))
    else:
        stack = _Stack(wheelset=_checked_wheelset(opts, report, steps))
    _preflight(opts, stack, report, steps, qual)
    _install_step(opts, stack, report, steps)
    if opts.tiny_model:
        _tiny_model_step(opts, steps)
    plan = _jit_cache_step(opts, opts.launch_plan(), report, steps, qual)
    try:
        return _serve_and_check(opts, plan, report, steps, processes, qual)
    except LaunchError as exc:
        raise SmokeFailed(Failure(stage="launch", message=str(exc), process=exc.role)) from None
    except ProcessExited as exc:
        raise SmokeFailed(_process_failure(exc.during, exc)) from None
    except NotReady as exc:
        raise SmokeFailed(_process_failure("readiness", exc)) from None


def _process_failure(stage: str, exc: ProcessExited | NotReady) -> Failure:
    """A failure in `stage` caused by one process: it, how it exited, the end of its log."""
    process = exc.process
    return Failure(
        stage=stage,
        message=str(exc),
        process=process.role,
        exit=process.describe_exit(),
        log=str(process.command.log),
        log_tail=log_tail(process.command.log),
    )


def _read_qualification_inputs(opts: SmokeOptions, qual: qualify.RunFacts) -> None:
    """The qualification's inputs (the wheel set the receipt binds, a reference to compare
    with, the gates' questions), read before minutes of server start-up."""
    try:
        qualify.prepare(opts, qual)
    except SglforgeError as exc:
        raise SmokeFailed(Failure("qualification inputs", str(exc))) from None


def _probe_existing_environment(
    opts: SmokeOptions, report: SmokeReport, steps: _Stages, qual: qualify.RunFacts
) -> EnvStack:
    """The "environment" step: what is installed in the existing environment (--python)."""
    assert opts.existing_python is not None
    with steps.step("environment") as detail:
        env = probe_environment(opts.existing_python)
        report.versions = env.versions()
        report.environment = env.summary()
        qual.environment = env
        built = [p.name for p in env.built_by_sglforge()]
        detail.append(
            f"{opts.existing_python}: {len(env.packages)} stack packages, built "
            f"by sglforge: {', '.join(built) or 'none'}"
        )
    return env


def _checked_wheelset(opts: SmokeOptions, report: SmokeReport, steps: _Stages) -> WheelSet:
    """The "wheels" and "stack check" steps: the project's wheel set agrees with the lock,
    and its wheels fit together."""
    with steps.step("wheels") as detail:
        wheelset = load_wheelset(opts.wheels_dir, opts.lock)
        report.versions = wheelset.versions()
        detail.append(f"{len(wheelset.wheels)} wheels match {opts.lock.name}")
    with steps.step("stack check") as detail:
        _stack_check(opts, steps, detail)
    return wheelset


def _preflight(
    opts: SmokeOptions,
    stack: _Stack,
    report: SmokeReport,
    steps: _Stages,
    qual: qualify.RunFacts,
) -> None:
    """The "doctor" step: the host's facts, judged against the profile and the stack."""
    profile = opts.profile
    with steps.step("doctor") as detail:
        probed = opts.python if (opts.reuse_venv or opts.existing_python) else None
        facts = doctor.gather_host_facts(profile, probed, stack.env)
        if opts.tiny_model:  # generated after the doctor, into the run directory
            facts = replace(facts, model_exists=None)
        report.host.update(_host_summary(facts))
        qual.facts = facts
        _judge(profile, stack.wheelset, facts, report, steps, detail)


def _install_step(opts: SmokeOptions, stack: _Stack, report: SmokeReport, steps: _Stages) -> None:
    """The "install" step: a fresh venv from the wheel set (unless an environment is given),
    then the launchers' modules must be importable there."""
    with steps.step("install") as detail:
        if opts.existing_python:
            detail.append(f"existing environment {opts.existing_python}: nothing installed")
        elif opts.reuse_venv:
            detail.append(f"reusing {opts.reuse_venv}")
        else:
            assert stack.wheelset is not None
            install(opts.install_plan(), stack.wheelset, opts.run_dir / "logs" / "install.log")
            detail.append(f"fresh venv {opts.venv}")
            _recheck_torch(opts, stack.wheelset, report, steps)
        _check_launch_modules(opts)


def _recheck_torch(
    opts: SmokeOptions, wheelset: WheelSet, report: SmokeReport, steps: _Stages
) -> None:
    """The doctor's torch ABI check again, in the fresh venv: torch is only known once the
    venv exists."""
    profile = opts.profile
    facts = doctor.gather_host_facts(profile, opts.python)
    torch_findings = [f for f in doctor.diagnose(profile, wheelset, facts) if f.check == "torch"]
    report.doctor = [f for f in report.doctor if f.check != "torch"] + torch_findings
    for finding in torch_findings:
        steps.say(finding.render())
    if blocking(torch_findings):
        raise SmokeFailed(Failure("install", torch_findings[0].message))


def _check_launch_modules(opts: SmokeOptions) -> None:
    """The server's and router's launch modules import in the stack's interpreter."""
    profile = opts.profile
    missing = missing_launch_modules(
        opts.python,
        {
            "[server] command": profile.server.command,
            "[router] command": profile.router.command,
        },
    )
    if missing:
        fix = (
            "install it into that environment or put it on PYTHONPATH"
            if opts.existing_python
            else f"pin the package (e.g. sglang-router==0.3.2 with its hash) in {opts.lock.name}"
        )
        raise SmokeFailed(
            Failure("install", "; ".join(missing) + f" — {fix}, or point the command elsewhere")
        )


def _tiny_model_step(opts: SmokeOptions, steps: _Stages) -> None:
    """The "model" step: the profile's tiny random-weight model, generated into its path."""
    profile = opts.profile
    with steps.step("model") as detail:
        log = opts.run_dir / "logs" / "tiny-model.log"
        model = Path(profile.model)
        seconds = tiny_model_in(opts.python, model, log, heads=profile.tiny_heads)
        detail.append(f"tiny random-weight model in {model} ({seconds:.1f} s, log {log})")


def _serve_and_check(
    opts: SmokeOptions,
    plan: LaunchPlan,
    report: SmokeReport,
    steps: _Stages,
    processes: ProcessSet,
    qual: qualify.RunFacts,
) -> int:
    """Launch the pair, wait for it, start the router, run the checks through it; the exit
    status."""
    _launch_servers(opts, plan, processes, report, steps)
    _wait_servers_ready(opts.profile.timeouts, processes, report, steps)
    _start_router(opts, plan, processes, report, steps)
    _record_startup(processes, report)
    checked = _run_checks(opts, plan, processes, report, steps, qual)
    _record_loaded(processes, report)  # while the servers still run
    failed = checked.failed
    if checked.pair_answers is not None:
        result = _equivalence_after_pair(opts, plan, processes, report, steps, checked.pair_answers)
        report.checks.append(result)
        failed += [] if result.passed else [result.name]
    if failed:
        report.failure = Failure("checks", f"check(s) failed: {', '.join(failed)}")
        _print_failure(report.failure, steps.err)
        return EXIT_FAIL
    return EXIT_PASS


def _process_entry(role: str, process: ManagedProcess) -> dict:
    """A started process as the report and processes.json list it."""
    command = process.command
    return {
        "role": role,
        "pid": process.popen.pid,
        "pgid": process.pgid,
        "argv": list(command.argv),
        "env": command.env,
        "log": str(command.log),
    }


def _launch_servers(
    opts: SmokeOptions,
    plan: LaunchPlan,
    processes: ProcessSet,
    report: SmokeReport,
    steps: _Stages,
) -> None:
    """The "launch" step: the PD pair's servers, each in its own process group."""
    with steps.step("launch") as detail:
        for command in plan.servers:
            steps.say(f"starting {command.summary}")
            process = processes.start(command)
            report.processes.append(_process_entry(command.role, process))
        _write_processes(opts.run_dir, report)
        detail.append(", ".join(f"{p['role']} pid {p['pid']}" for p in report.processes))


def _wait_servers_ready(
    timeouts: Timeouts, processes: ProcessSet, report: SmokeReport, steps: _Stages
) -> None:
    """The "health" and "health_generate" steps. The servers load at the same time: polled at
    once, one deadline per endpoint, each one's readiness counted from its own launch."""
    for endpoint, seconds in (
        ("/health", timeouts.health),
        ("/health_generate", timeouts.health_generate),
    ):
        with steps.step(endpoint.lstrip("/")) as detail:
            ready = wait_all_ready(processes, list(processes.processes), endpoint, seconds)
            for role, since in ready.items():
                report.ready(role, endpoint, since)
                detail.append(f"{role} ready {since:.1f} s after its launch")


def _start_router(
    opts: SmokeOptions,
    plan: LaunchPlan,
    processes: ProcessSet,
    report: SmokeReport,
    steps: _Stages,
) -> None:
    """The "router" step: start it and wait until it has healthy workers registered."""
    profile = opts.profile
    with steps.step("router") as detail:
        steps.say(f"starting {plan.router.summary}")
        router = processes.start(plan.router)
        report.processes.append(_process_entry("router", router))
        _write_processes(opts.run_dir, report)
        # Not /health: the router answers it before any worker is registered.
        wait_ready(processes, router, profile.router.ready_path, profile.timeouts.router)
        since = report.ready("router", profile.router.ready_path, router.since_launch())
        detail.append(f"ready {since:.1f} s after its launch")


def _run_checks(
    opts: SmokeOptions,
    plan: LaunchPlan,
    processes: ProcessSet,
    report: SmokeReport,
    steps: _Stages,
    qual: qualify.RunFacts,
) -> _Checked:
    """The "checks" step: the profile's checks through the router, then the qualification's."""
    profile = opts.profile
    ctx = CheckContext(
        router_url=plan.router.url,
        spec=profile.checks,
        timeout=profile.timeouts.request,
        equivalence=profile.equivalence,
        colocated_url=plan.colocated.url if plan.colocated else None,
    )
    with steps.step("checks") as detail:
        pair_answers = _profile_checks(profile, plan, ctx, processes, report, steps)
        _qualification_checks(opts, ctx, processes, report, steps, qual)
        failed = [c.name for c in report.checks if not c.passed and c.enforced]
        detail.append(
            f"{len(report.checks) - len(failed)} passed"
            + (f", failed: {', '.join(failed)}" if failed else "")
        )
    return _Checked(failed, pair_answers)


def _profile_checks(
    profile: SmokeProfile,
    plan: LaunchPlan,
    ctx: CheckContext,
    processes: ProcessSet,
    report: SmokeReport,
    steps: _Stages,
) -> list | None:
    """`[checks] run`, in order, each result into the report; the pair's answers for an
    equivalence check that waits for the colocated server (started after the pair)."""
    pair_answers = None
    for name in profile.checks.run:
        if name == "equivalence" and plan.colocated_after_pair:
            pair_answers = equivalence.collect(
                plan.router.url, profile.equivalence, profile.timeouts.request
            )
            steps.say(
                "check equivalence: the pair's answers are kept; the colocated "
                "server starts once the pair is stopped"
            )
            continue
        result = run_check(name, ctx)
        report.checks.append(result)
        steps.say(f"check {name}: {'pass' if result.passed else 'FAIL'} — {result.detail}")
        # A failed request is often a dead server: name it rather than the symptom.
        # The router can answer 502 a moment before the kernel reports the exit.
        if not result.passed:
            processes.wait_for_any_exit(seconds=2.0)
        processes.check_alive(f"check '{name}'")
    return pair_answers


def _qualification_checks(
    opts: SmokeOptions,
    ctx: CheckContext,
    processes: ProcessSet,
    report: SmokeReport,
    steps: _Stages,
    qual: qualify.RunFacts,
) -> None:
    """The qualification's checks (the gates, recording or comparing a reference), each into
    the report."""
    for result in qualify.run_qualification(opts, ctx.router_url, ctx.timeout, qual):
        report.checks.append(result)
        mark = "pass" if result.passed else ("FAIL" if result.enforced else "fail (not enforced)")
        steps.say(f"{result.name}: {mark} — {result.detail}")
        processes.check_alive(f"check '{result.name}'")


def _equivalence_after_pair(
    opts: SmokeOptions,
    plan: LaunchPlan,
    processes: ProcessSet,
    report: SmokeReport,
    steps: _Stages,
    pair_answers: list,
):
    """`[colocated] start = "after-pair"`: stop the pair and router, start the colocated
    server on the GPU they freed, ask it the same prompts, compare with the kept answers."""
    profile = opts.profile
    timeouts = profile.timeouts
    assert plan.colocated is not None
    with steps.step("colocated") as detail:
        stopped = processes.stop_current()
        report.teardown["before_colocated"] = {
            "signalled": stopped.signalled,
            "survivors": stopped.survivors,
            "seconds": round(stopped.seconds, 3),
        }
        if stopped.survivors:
            raise SmokeFailed(
                Failure(
                    "colocated",
                    "the pair did not stop before the colocated "
                    f"server: survivors {stopped.survivors}",
                )
            )
        detail.append(f"pair and router stopped in {stopped.seconds:.1f} s")
        steps.say(f"starting {plan.colocated.summary}")
        process = processes.start(plan.colocated)
        report.processes.append(_process_entry("colocated", process))
        _write_processes(opts.run_dir, report)
        for endpoint, seconds in (
            ("/health", timeouts.health),
            ("/health_generate", timeouts.health_generate),
        ):
            wait_ready(processes, process, endpoint, seconds)
            since = report.ready("colocated", endpoint, process.since_launch())
            detail.append(f"{endpoint} {since:.1f} s after its launch")
        start = time.monotonic()
        answers = equivalence.collect(plan.colocated.url, profile.equivalence, timeouts.request)
        result = equivalence.compare(pair_answers, answers, profile.equivalence)
        result.seconds = round(time.monotonic() - start, 4)
        _record_loaded(processes, report)
        steps.say(f"check equivalence: {'pass' if result.passed else 'FAIL'} — {result.detail}")
    return result


def _jit_cache_step(
    opts: SmokeOptions,
    plan: LaunchPlan,
    report: SmokeReport,
    steps: _Stages,
    qual: qualify.RunFacts,
) -> LaunchPlan:
    """The "jit cache" step (issue 34): the servers' JIT caches from an artifact, into a fresh
    root for `warm`, or in a given directory; millisecond log stamps for the start-up phases.
    Without --jit-cache/--jit-root/warm there is no such step and the profile's environment
    stands."""
    plan = jitstep.with_env_defaults(plan, {"SGLANG_LOG_MS": "1"})
    if not (opts.jit_cache or opts.jit_root or opts.warm_into):
        return plan
    with steps.step("jit cache") as detail:
        try:
            plan, report.jit_cache, lines = jitstep.prepare(opts, qual.facts, plan, steps.say)
        except SglforgeError as exc:
            raise SmokeFailed(Failure("jit cache", str(exc))) from None
        detail += lines
    return plan


def _record_startup(processes: ProcessSet, report: SmokeReport) -> None:
    """Launch to router readiness, and each server's phases from its log (smoke/startup.py)."""
    now_mono, now_wall = time.monotonic(), time.time()
    servers = [p for p in processes.processes if p.role != "router"]
    first = min((p.started for p in processes.processes), default=now_mono)
    report.startup = {"ready_s": round(now_mono - first, 3), "servers": {}}
    for process in servers:
        ready = report.readiness.get(process.role, {}).get("/health_generate")
        launched_at = now_wall - (now_mono - process.started)
        report.startup["servers"][process.role] = {
            "ready_s": ready,
            **startup.log_phases(process.command.log, launched_at, ready),
        }
    router = next((p for p in processes.processes if p.role == "router"), None)
    if router is not None:
        report.startup["router_s"] = round(now_mono - router.started, 3)


def _pack_warm(opts: SmokeOptions, report: SmokeReport, code: int, steps: _Stages) -> int:
    """`warm`: after a passing run (servers stopped), the cache root becomes the artifact."""
    if not opts.warm_into or code != EXIT_PASS or not report.jit_cache.get("root"):
        return code
    try:
        packed = jitstep.pack_after_warm(opts, report.jit_cache)
    except (SglforgeError, OSError) as exc:
        _safe_print(f"error: warm: the JIT cache could not be packed: {exc}", steps.err)
        return EXIT_FAIL
    steps.say(
        f"warm: {packed.files} files ({packed.bytes} bytes) -> {packed.path} "
        f"(sha256 {packed.sha256})"
    )
    return code


# What a server JIT-compiled, where: SGLang sets DG_JIT_CACHE_DIR from SGLANG_DG_CACHE_DIR
# (default ~/.cache/deep_gemm) at import, so that one wins where it is set.
JIT_CACHE_ENV = {"deep_gemm": ("SGLANG_DG_CACHE_DIR", "DG_JIT_CACHE_DIR")}


def _record_loaded(processes: ProcessSet, report: SmokeReport) -> None:
    """Each running server's mapped stack libraries and transfer log lines (smoke/loaded.py):
    evidence for the report, never a reason to fail."""
    for process in processes.processes:
        if process.role == "router" or process.exit_status() is not None:
            continue
        env = process.command.env
        jit = {
            name: Path(next(env[v] for v in names if env.get(v)))
            for name, names in JIT_CACHE_ENV.items()
            if any(env.get(v) for v in names)
        }
        try:
            report.loaded[process.role] = loaded.evidence(process, jit)
        except OSError as exc:
            report.loaded[process.role] = {"error": str(exc)}


def _stack_check(opts: SmokeOptions, steps: _Stages, detail: list[str]) -> None:
    """The wheels fit together (`sglforge check` against the smoke's lock) before anything is
    installed or launched."""
    from sglforge.check.run import CheckOptions, render, run_check
    from sglforge.inputs.project import Project

    result = run_check(
        Project(opts.project_root), CheckOptions(wheels_dir=opts.wheels_dir, runtime_lock=opts.lock)
    )
    _safe_print(render(result), steps.out)
    errors = result.findings.errors
    detail.append(f"{len(errors)} error(s)")
    if errors:
        raise SmokeFailed(
            Failure(
                stage="stack check",
                message=(
                    f"the wheels do not fit together ({len(errors)} error(s)); first: "
                    f"{errors[0].check}: {errors[0].message}"
                ),
            )
        )


def tiny_model_in(python: Path, model: Path, log: Path, heads: int = 2) -> float:
    """Generate the tiny model with the stack's interpreter (it has torch and transformers;
    sglforge itself comes from this process's import path)."""
    import os
    import subprocess

    import sglforge

    start = time.monotonic()
    log.parent.mkdir(parents=True, exist_ok=True)
    package_root = str(Path(sglforge.__file__).resolve().parent.parent)
    path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
    argv = [
        str(python),
        "-m",
        "sglforge",
        "tiny-model",
        str(model),
        "--force",
        "--heads",
        str(heads),
    ]
    with open(log, "w") as out:
        out.write(f"$ PYTHONPATH={path} {' '.join(argv)}\n")
        out.flush()
        result = subprocess.run(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": path},
        )
    if result.returncode != 0:
        raise SmokeFailed(
            Failure(
                "model",
                f"generating the tiny model failed (exit {result.returncode})",
                log=str(log),
                log_tail=log_tail(log),
            )
        )
    return time.monotonic() - start


def _judge(
    profile: SmokeProfile,
    wheelset: WheelSet | None,
    facts: doctor.HostFacts,
    report: SmokeReport,
    steps: _Stages,
    detail: list[str],
) -> None:
    findings = doctor.diagnose(profile, wheelset, facts)
    report.doctor = findings
    for finding in findings:
        if finding.level != doctor.OK:
            steps.say(finding.render())
    errors = blocking(findings)
    detail.append(
        f"{len(errors)} error(s), {sum(f.level == doctor.WARNING for f in findings)} warning(s)"
    )
    if errors:
        raise SmokeFailed(
            Failure(
                "doctor",
                "doctor found blocking problems; nothing was "
                "started: " + " | ".join(f.message for f in errors),
            )
        )


def _write_processes(run_dir: Path, report: SmokeReport) -> None:
    """pids and process groups of this run, for an operator (or a test) to verify teardown."""
    atomic_write_text(run_dir / "processes.json", json.dumps(report.processes, indent=2) + "\n")


def _host_summary(facts: doctor.HostFacts) -> dict:
    return {
        "driver": facts.driver_version or "",
        "nvcc": facts.nvcc_version or "",
        "gpus": "; ".join(
            f"{g.index}: {g.name} cc {g.compute_cap} numa {g.numa_node}" for g in facts.gpus
        )
        or (facts.nvidia_smi_error or ""),
        "numa_nodes": ",".join(map(str, facts.numa_nodes or ())),
        "torch": facts.torch_version or "",
    }
