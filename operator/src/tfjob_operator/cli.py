"""`tfjob-operator`: run the controller, preview what it would create for a TFJob, write
one from a few choices, submit and follow TFJobs (client/commands.py), or say its version;
the same as kubectl's plugin `kubectl tfjob`, with completion for both (client/completion.py).

Exit codes are the client's (`ExitCode`): a usage error is 3, as any command that cannot
run, so that 1 and 2 keep meaning a failed and a timed-out job."""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from . import published, render_command, scaffold
from .api import KUBEFLOW, TFJOB_DEV
from .apiserver.connection import CredentialsError
from .apiserver.errors import ApiError
from .client import commands as client_commands
from .client import completion
from .client.commands import ExitCode
from .client.jobs import TFJobClient
from .integrations.gang import (
    KUBEFLOW_SCHEDULER_PLUGINS,
    SCHEDULER_PLUGINS_NAME,
    VOLCANO_NAME,
    GangSchedulers,
)
from .limits import (
    CONCURRENT_RECONCILES,
    INVALID_POD_GRACE_SECONDS,
    LEASE_DURATION_SECONDS,
    LEASE_NAME,
    MAX_IN_FLIGHT,
    RENEW_DEADLINE_SECONDS,
    RETRY_PERIOD_SECONDS,
)
from .spec import InvalidSpec

if TYPE_CHECKING:
    from .leader import Election


PROG = "tfjob-operator"
KUBECTL_PROG = "kubectl tfjob"
#: The hidden first word of the shells' completion scripts (completion.py).
COMPLETE = "__complete"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(ExitCode.ERROR, f"{self.prog}: error: {message}\n")


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(prog)
    if words[:1] == [COMPLETE]:
        sys.stdout.write(completion.complete(parser, words[1:], _job_names).lines())
        return 0
    args = parser.parse_args(words)
    if args.subcommand == "version":
        print(f"tfjob-operator {published.VERSION}")
        print(f"  operator image  {published.operator_image()}")
        print(f"  trainer images  {published.trainer_image()}, {published.trainer_image(gpu=True)}")
        print(f"  chart           {published.chart_reference()} --version {published.VERSION}")
        return 0
    if args.subcommand == "completion":
        sys.stdout.write(completion.script(args.shell, prog))
        return 0
    if args.subcommand == "render":
        return render_command.run(args.filename, args.namespace, args.cluster_domain)
    if args.subcommand in client_commands.COMMANDS:
        return client_commands.run(args)
    if args.subcommand == "new":
        return _new(args, shlex.join(words[words.index("new") + 1 :]))
    return _run(args)


def kubectl_plugin() -> int:
    """`kubectl tfjob ...`: kubectl runs `kubectl-tfjob` from PATH with the words after
    `tfjob` (kubectl's own flags go after them: `kubectl tfjob get -n team`)."""
    return main(prog=KUBECTL_PROG)


def kubectl_plugin_completion() -> int:
    """`kubectl_complete-tfjob WORD...`: kubectl's completion of `kubectl tfjob`."""
    return main([COMPLETE, *sys.argv[1:]], prog=KUBECTL_PROG)


def _job_names(where: completion.Where) -> list[str]:
    """The TFJobs of the namespace the command line names; none when the API server cannot
    say (completion prints no errors)."""
    try:
        client = TFJobClient(where.namespace, kubeconfig=where.kubeconfig, context=where.context)
        return [job.name for job in client.list()]
    except (ApiError, CredentialsError, ConnectionError, OSError, ValueError):
        return []


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The command line of `tfjob-operator` (and of `kubectl tfjob`, under that name)."""
    parser = _Parser(prog=prog, description="Kubernetes operator for distributed TensorFlow")
    commands = parser.add_subparsers(dest="subcommand", required=True)

    run = commands.add_parser("run", help="run the controller")
    run.add_argument(
        "--namespace",
        action="append",
        default=[],
        help="namespace to watch (repeatable); default: all namespaces",
    )
    run.add_argument(
        "--cluster-domain",
        default=None,
        help="DNS domain appended to TF_CONFIG hosts (e.g. cluster.local); default: none",
    )
    run.add_argument(
        "--kubeconfig",
        default=None,
        help="kubeconfig when not running in a pod (default: $KUBECONFIG, ~/.kube/config)",
    )
    run.add_argument(
        "--health-port",
        type=int,
        default=8081,
        help="port of the probes: /healthz (liveness) and /readyz (caches filled)",
    )
    run.add_argument("--metrics-port", type=int, default=8080, help="Prometheus /metrics port")
    run.add_argument(
        "--metrics-secure",
        action="store_true",
        help="serve /metrics over HTTPS, only to callers the API server authenticates and "
        "allows to get /metrics (TokenReview, SubjectAccessReview; the chart's default)",
    )
    run.add_argument(
        "--metrics-cert-dir",
        default=None,
        metavar="DIR",
        help="with --metrics-secure: tls.crt and tls.key to serve with (default: a "
        "self-signed certificate made at start)",
    )
    run.add_argument(
        "--max-in-flight",
        type=int,
        default=MAX_IN_FLIGHT,
        help="most concurrent write requests to the API server",
    )
    run.add_argument(
        "--concurrent-reconciles",
        type=int,
        default=CONCURRENT_RECONCILES,
        help="most TFJobs reconciled at once (their writes then share --max-in-flight)",
    )
    run.add_argument(
        "--kubeflow",
        action="store_true",
        help="also reconcile Kubeflow's kubeflow.org/v1 TFJobs (their CRD must be installed)",
    )
    run.add_argument(
        "--gang-scheduler-name",
        default=None,
        help=(
            "gang-schedule every TFJob whose pod templates name no scheduler with this one: "
            f"{SCHEDULER_PLUGINS_NAME} (or Kubeflow's value {KUBEFLOW_SCHEDULER_PLUGINS}) or "
            f"{VOLCANO_NAME}; a job naming either in its templates is gang-scheduled anyway"
        ),
    )
    run.add_argument(
        "--scheduler-plugins-name",
        default=SCHEDULER_PLUGINS_NAME,
        help="the schedulerName scheduler-plugins' Coscheduling scheduler runs under",
    )
    run.add_argument(
        "--invalid-pod-grace-seconds",
        type=float,
        default=INVALID_POD_GRACE_SECONDS,
        metavar="SECONDS",
        help=(
            "how long the API server may refuse a job's pod or service as invalid (400, 422) "
            "before the job fails; forbidden or quota refusals (403) keep it waiting "
            "(default: %(default)ss)"
        ),
    )
    run.add_argument(
        "--tensorboard-image",
        default=published.trainer_image(),
        metavar="IMAGE",
        help=(
            "the image of the TensorBoards of TFJobs that ask for one and name no image; "
            "it runs `tensorboard` (default: the trainer of this release, %(default)s)"
        ),
    )
    election = run.add_argument_group(
        "leader election",
        "several operators, one leading: the others fill their caches and wait (leader.py)",
    )
    election.add_argument(
        "--leader-elect",
        action="store_true",
        help="elect a leader on a coordination.k8s.io/v1 Lease (the chart does; off by default)",
    )
    election.add_argument(
        "--leader-election-namespace",
        default=None,
        help="the Lease's namespace (default: the pod's, $POD_NAMESPACE)",
    )
    election.add_argument("--leader-election-id", default=LEASE_NAME, help="the Lease's name")
    election.add_argument(
        "--leader-election-identity",
        default=None,
        help="this candidate's name in the Lease (default: the pod's name, $POD_NAME)",
    )
    for flag, value, meaning in (
        ("lease-duration", LEASE_DURATION_SECONDS, "how long a Lease not renewed holds"),
        ("renew-deadline", RENEW_DEADLINE_SECONDS, "how long the leader tries to renew"),
        ("retry-period", RETRY_PERIOD_SECONDS, "between tries to take or renew"),
    ):
        election.add_argument(
            f"--leader-election-{flag}",
            type=float,
            default=value,
            metavar="SECONDS",
            help=f"{meaning} (default: %(default)ss)",
        )
    run.add_argument("--log-format", choices=("text", "json"), default="text")
    run.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")

    render = commands.add_parser(
        "render", help="print the pods and services the controller would create for a TFJob"
    )
    render.add_argument("-f", "--filename", required=True, help="TFJob YAML ('-' for stdin)")
    render.add_argument("--namespace", default="default", help="namespace if the TFJob has none")
    render.add_argument("--cluster-domain", default=None)

    new = commands.add_parser("new", help="write a commented TFJob YAML from a few choices")
    scaffold.add_arguments(new)

    client_commands.add_commands(commands)

    commands.add_parser(
        "version", help="print the version, and the images and chart that release publishes"
    )
    shells = commands.add_parser(
        "completion",
        help=f"print the completion script of bash or zsh: source <({prog} completion bash)",
    )
    shells.add_argument("shell", choices=sorted(completion.SCRIPTS))
    return parser


def _new(args: argparse.Namespace, invocation: str) -> int:
    try:
        text = scaffold.render(scaffold.choices_from(args), invocation)
        scaffold.validate_rendered(text)
    except (scaffold.ScaffoldError, InvalidSpec) as error:
        print(f"error: {error}", file=sys.stderr)
        return ExitCode.ERROR
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(text)
    return 0


def _run(args: argparse.Namespace) -> int:
    # Imported here: every other command works without the controller's dependencies,
    # which are the package's extra (a notebook installs the client alone).
    try:
        from .leader import ElectionError
        from .logs import configure_logging
        from .metrics_access import serving_context
        from .operator_main import run_operator
    except ModuleNotFoundError as missing:
        print(
            f"error: `run` needs the controller's dependencies ({missing.name} is missing): "
            "pip install 'tfjob-operator[controller]'",
            file=sys.stderr,
        )
        return ExitCode.ERROR

    configure_logging(args.log_format, args.log_level)
    try:
        gangs = GangSchedulers.configure(args.gang_scheduler_name, args.scheduler_plugins_name)
        election = _election(args) if args.leader_elect else None
        if args.health_port == args.metrics_port:
            raise ValueError("--health-port and --metrics-port must differ")
        if args.metrics_cert_dir and not args.metrics_secure:
            raise ValueError("--metrics-cert-dir needs --metrics-secure")
        tls = serving_context(args.metrics_cert_dir) if args.metrics_secure else None
    except (ValueError, ElectionError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return ExitCode.ERROR
    return asyncio.run(
        run_operator(
            kubeconfig=args.kubeconfig,
            apis=(TFJOB_DEV, KUBEFLOW) if args.kubeflow else (TFJOB_DEV,),
            namespaces=args.namespace,
            cluster_domain=args.cluster_domain,
            health_port=args.health_port,
            metrics_port=args.metrics_port,
            max_in_flight=args.max_in_flight,
            concurrent_reconciles=args.concurrent_reconciles,
            gangs=gangs,
            invalid_grace_seconds=args.invalid_pod_grace_seconds,
            tensorboard_image=args.tensorboard_image,
            election=election,
            metrics_tls=tls,
        )
    )


def _election(args: argparse.Namespace) -> Election:
    from .leader import Election, ElectionError, Timings, default_identity, default_namespace

    namespace = args.leader_election_namespace or default_namespace()
    if namespace is None:
        raise ElectionError(
            "--leader-elect: give --leader-election-namespace (no pod namespace to default to)"
        )
    timings = Timings(
        args.leader_election_lease_duration,
        args.leader_election_renew_deadline,
        args.leader_election_retry_period,
    )
    timings.check()
    identity = args.leader_election_identity or default_identity()
    return Election(namespace, args.leader_election_id, identity, timings)


if __name__ == "__main__":
    sys.exit(main())
