"""`tfjob-operator submit | get | wait | logs | describe | delete | tensorboard`: the client
on a terminal.

They take `-n/--namespace`, `--kubeconfig` and `--context` as kubectl does, and end with
an exit code a script can branch on (`ExitCode`): 0 the job succeeded (or the command did
what it was asked), 1 it failed, 2 the wait timed out, 3 the command could not run (a
usage error, no such job, a refusal of the API server, no API server). Colour and the
progress line are for terminals only: piped, the output is plain lines.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from enum import IntEnum
from pathlib import Path
from typing import Any, TextIO

import yaml

from ..api import ConditionType
from ..apiserver.connection import CredentialsError
from ..apiserver.errors import ApiError
from ..timeutil import now
from . import report
from .jobs import LogLine, TFJobClient, WaitTimedOut
from .views import FINISHED, TFJob


class ExitCode(IntEnum):
    SUCCEEDED = 0
    FAILED = 1
    TIMED_OUT = 2
    ERROR = 3


COMMANDS = ("submit", "get", "wait", "logs", "describe", "delete", "tensorboard")
STATES = tuple(kind.value for kind in ConditionType)
#: ANSI colours given to replicas' prefixes in turn, on a terminal.
_COLOURS = (36, 33, 35, 32, 34, 31)


def add_commands(commands: argparse._SubParsersAction[Any]) -> None:
    """Adds the client's subcommands to the `tfjob-operator` parser."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-n", "--namespace", default=None, help="default: the context's")
    common.add_argument("--kubeconfig", default=None, help="default: $KUBECONFIG, ~/.kube/config")
    common.add_argument("--context", default=None, help="the kubeconfig context to use")

    submit = commands.add_parser(
        "submit",
        parents=[common],
        help="create a TFJob from YAML, or from a Python function; optionally follow and wait",
    )
    source = submit.add_mutually_exclusive_group(required=True)
    source.add_argument("-f", "--filename", help="TFJob YAML ('-' for stdin)")
    source.add_argument(
        "--train",
        metavar="FILE.py:FUNCTION",
        help="run FUNCTION(ctx) from FILE.py in a new TFJob (TFJobClient.train)",
    )
    function = submit.add_argument_group("with --train")
    function.add_argument("--name", help="the TFJob's name (default: the function's)")
    function.add_argument("--workers", type=int, default=2)
    function.add_argument("--ps", type=int, default=0, help="parameter servers (> 0: pss)")
    function.add_argument("--chief", action="store_true")
    function.add_argument("--evaluator", action="store_true")
    function.add_argument("--image", default=None, help="default: the release's trainer")
    function.add_argument(
        "--package", action="append", default=[], help="installed at start (repeatable)"
    )
    function.add_argument(
        "--package-index", default=None, help="the index packages come from (default: PyPI)"
    )
    function.add_argument(
        "--request",
        action="append",
        default=[],
        metavar="RESOURCE=QUANTITY",
        help="each replica's request, e.g. cpu=500m (repeatable)",
    )
    function.add_argument(
        "--train-arg", action="append", default=[], help="a tfjob-train flag (repeatable)"
    )
    submit.add_argument("--wait", action="store_true", help="wait until it finishes")
    submit.add_argument("--follow", action="store_true", help="print every replica's log")
    _timeout(submit)

    get = commands.add_parser("get", parents=[common], help="list TFJobs, or show one")
    get.add_argument("name", nargs="?", help="one TFJob (default: all in the namespace)")
    get.add_argument("-A", "--all-namespaces", action="store_true")
    get.add_argument("-o", "--output", choices=("table", "yaml", "json"), default="table")

    wait = commands.add_parser(
        "wait", parents=[common], help="wait until a TFJob finishes (or reaches --for)"
    )
    wait.add_argument("name")
    wait.add_argument(
        "--for",
        dest="states",
        action="append",
        choices=STATES,
        help="a state to wait for (repeatable; default: Succeeded or Failed)",
    )
    _timeout(wait)

    logs = commands.add_parser(
        "logs", parents=[common], help="every replica's log, prefixed by replica"
    )
    logs.add_argument("name")
    logs.add_argument("-f", "--follow", action="store_true", help="until the job finishes")
    logs.add_argument("--replica", default=None, help="only this one, e.g. worker-1")

    describe = commands.add_parser(
        "describe", parents=[common], help="status, replicas, reasons, events, failed logs"
    )
    describe.add_argument("name")

    delete = commands.add_parser("delete", parents=[common], help="delete a TFJob and its pods")
    delete.add_argument("name")
    delete.add_argument("--wait", action="store_true", help="until the job and its pods are gone")

    board = commands.add_parser(
        "tensorboard",
        parents=[common],
        help="serve a TFJob's TensorBoard on a local port (through the API server)",
    )
    board.add_argument("name")
    board.add_argument("--port", type=int, default=6006, help="local port (default: 6006; 0: any)")
    board.add_argument("--address", default="127.0.0.1", help="local address to listen on")


def _timeout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timeout",
        type=_duration,
        default=None,
        metavar="DURATION",
        help="give up after this long (600, 90s, 10m, 2h; default: no limit); exit code 2",
    )


def _duration(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        if text and text[-1] in units:
            return float(text[:-1]) * units[text[-1]]
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r}") from None


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Runs the subcommand `args` names; returns its exit code (stdout and stderr unless
    `out` and `err` are given)."""
    out, err = out or sys.stdout, err or sys.stderr
    try:
        client = TFJobClient(args.namespace, kubeconfig=args.kubeconfig, context=args.context)
        command: Callable[[TFJobClient, argparse.Namespace, TextIO, TextIO], ExitCode] = {
            "submit": _submit,
            "get": _get,
            "wait": _wait,
            "logs": _logs,
            "describe": _describe,
            "delete": _delete,
            "tensorboard": _tensorboard,
        }[args.subcommand]
        return int(command(client, args, out, err))
    except WaitTimedOut as timed_out:
        print(f"timed out: {timed_out}", file=err)
        return ExitCode.TIMED_OUT
    except (ApiError, CredentialsError, ConnectionError, OSError, ValueError) as error:
        print(f"error: {error}", file=err)
        return ExitCode.ERROR
    except KeyboardInterrupt:
        return 130


def _submit(client: TFJobClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> ExitCode:
    if args.train:
        job = client.train(
            load_function(args.train),
            name=args.name,
            workers=args.workers,
            ps=args.ps,
            chief=args.chief,
            evaluator=args.evaluator,
            image=args.image,
            packages=args.package,
            package_index=args.package_index,
            resources=_requests(args.request),
            trainer_args=args.train_arg,
        )
    else:
        # A file by its path; stdin as YAML text, which the client tells from a path by
        # its line break.
        text = sys.stdin.read().rstrip() + "\n" if args.filename == "-" else None
        job = client.create(text if text is not None else Path(args.filename))
    print(f"tfjob.{job.api_version.split('/')[0]}/{job.name} created", file=out)
    if args.follow:
        _print_lines(client.logs(job.name, follow=True, namespace=job.namespace), out)
    if not (args.wait or args.follow):
        return ExitCode.SUCCEEDED
    return _outcome(_wait_for(client, job.name, job.namespace, FINISHED, args.timeout, err), out)


def load_function(spec: str) -> Callable[..., Any]:
    """FUNCTION of FILE.py (`FILE.py:FUNCTION`), the file run as a module named after it,
    its directory first on the module path; ValueError saying what is missing."""
    path_text, _, name = spec.rpartition(":")
    path = Path(path_text)
    if not path_text.endswith(".py") or not name:
        raise ValueError(f"--train {spec}: expected FILE.py:FUNCTION")
    if not path.is_file():
        raise ValueError(f"--train {spec}: no file {path}")
    loader = importlib.util.spec_from_file_location(path.stem, path)
    if loader is None or loader.loader is None:
        raise ValueError(f"--train {spec}: {path} cannot be imported")
    module = importlib.util.module_from_spec(loader)
    sys.modules[path.stem] = module
    sys.path.insert(0, str(path.resolve().parent))
    loader.loader.exec_module(module)
    function = getattr(module, name, None)
    if not callable(function):
        raise ValueError(f"--train {spec}: {path} has no function {name!r}")
    return function  # type: ignore[no-any-return]


def _requests(pairs: Sequence[str]) -> dict[str, Any] | None:
    """`--request cpu=500m --request memory=1Gi` as a container's resources."""
    requests = {}
    for pair in pairs:
        resource, separator, quantity = pair.partition("=")
        if not separator or not resource or not quantity:
            raise ValueError(f"--request {pair}: expected RESOURCE=QUANTITY, e.g. cpu=500m")
        requests[resource] = quantity
    return {"requests": requests} if requests else None


def _get(client: TFJobClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> ExitCode:
    jobs = [client.get(args.name)] if args.name else client.list(all_namespaces=args.all_namespaces)
    if args.output == "json":
        body: Any = jobs[0].object if args.name else {"items": [j.object for j in jobs]}
        print(json.dumps(body, indent=2), file=out)
    elif args.output == "yaml":
        body = jobs[0].object if args.name else {"items": [j.object for j in jobs]}
        print(yaml.safe_dump(body, sort_keys=False), end="", file=out)
    elif jobs:
        dispatches = {
            job.uid: dispatch for job in jobs if (dispatch := client.dispatch(job)) is not None
        }
        print(
            report.table(jobs, now(), namespaces=args.all_namespaces, dispatches=dispatches),
            file=out,
        )
    else:
        print(f"No TFJobs found in {client.namespace} namespace.", file=err)
    return ExitCode.SUCCEEDED


def _wait(client: TFJobClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> ExitCode:
    states = tuple(args.states or FINISHED)
    job = _wait_for(client, args.name, None, states, args.timeout, err)
    if args.states and job.state in states:  # what was asked for, even Failed
        print(f"{job.name}: {report.state_text(job)}", file=out)
        return ExitCode.SUCCEEDED
    return _outcome(job, out)


def _wait_for(
    client: TFJobClient,
    name: str,
    namespace: str | None,
    states: tuple[str, ...],
    timeout: float | None,
    err: TextIO,
) -> TFJob:
    # The progress line goes to stderr, on a terminal only: stdout stays for the result.
    progress: TextIO | bool = err if err.isatty() else False
    return client.wait(name, states, timeout=timeout, namespace=namespace, progress=progress)


def _outcome(job: TFJob, out: TextIO) -> ExitCode:
    print(f"{job.name}: {report.state_text(job)}", file=out)
    if job.succeeded:
        return ExitCode.SUCCEEDED
    return ExitCode.FAILED


def _logs(client: TFJobClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> ExitCode:
    _print_lines(client.logs(args.name, replica=args.replica, follow=args.follow), out)
    return ExitCode.SUCCEEDED


def _print_lines(lines: Iterator[LogLine], out: TextIO) -> None:
    colour = out.isatty() and "NO_COLOR" not in os.environ
    colours: dict[str, int] = {}
    for line in lines:
        if colour:
            code = colours.setdefault(line.replica, _COLOURS[len(colours) % len(_COLOURS)])
            print(f"\033[{code}m[{line.replica}]\033[0m {line.text}", file=out, flush=True)
        else:
            print(line, file=out, flush=True)


def _describe(client: TFJobClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> ExitCode:
    print(client.describe(args.name), file=out)
    return ExitCode.SUCCEEDED


def _delete(client: TFJobClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> ExitCode:
    job = client.delete(args.name, wait=args.wait)
    print(f"tfjob.{job.api_version.split('/')[0]}/{job.name} deleted", file=out)
    return ExitCode.SUCCEEDED


def _tensorboard(
    client: TFJobClient, args: argparse.Namespace, out: TextIO, err: TextIO
) -> ExitCode:
    job = client.get(args.name)
    with client.tensorboard(job, port=args.port, address=args.address) as forward:
        print(f"TensorBoard of {job.namespace}/{job.name}: {forward.url}", file=out, flush=True)
        if not job.tensorboard.get("ready"):
            print("(not ready yet: the page loads once it is)", file=err, flush=True)
        print("Ctrl-C stops forwarding.", file=err, flush=True)
        threading.Event().wait()
    return ExitCode.SUCCEEDED
