"""`tfjob-operator new`: a commented TFJob YAML from a few choices.

The YAML is for people to read and edit, so it is rendered from a jinja2 template with
comments; every value a user typed is emitted as a quoted string, so no input (quotes,
colons, newlines, `{{ }}`) can change the structure of the document.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import jinja2
import yaml

from .crd.structural import QUANTITY_PATTERN
from .published import trainer_image
from .spec import DNS_1035, MAX_CHILD_NAME, parse_spec

STRATEGIES = {"mwms": "MultiWorkerMirroredStrategy", "pss": "ParameterServerStrategy"}
#: Where a run keeps its model, checkpoints and logs on the shared volume. $(TFJOB_UID)
#: (set by the operator) keeps each run of the job in its own directory: a rerun must not
#: resume from the checkpoints of the run before.
SHARED_RUN_DIR = "/shared/$(TFJOB_NAMESPACE)/$(TFJOB_NAME)-$(TFJOB_UID)"
DNS_1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
QUANTITY = re.compile(QUANTITY_PATTERN)


class ScaffoldError(ValueError):
    """A choice that cannot make a valid TFJob; the message says which and why."""


@dataclass(frozen=True)
class Choices:
    name: str
    strategy: str = "mwms"
    workers: int = 2
    ps: int = 0
    chief: bool = False
    evaluator: bool = False
    gpus: int = 0
    image: str = trainer_image()
    command: tuple[str, ...] = ("tfjob-train",)
    args: tuple[str, ...] | None = None
    namespace: str | None = None
    #: A host directory mounted at /shared; None: each pod's own emptyDir (unless `pvc`).
    shared_dir: str | None = None
    #: A PersistentVolumeClaim mounted at /shared.
    pvc: str | None = None
    #: With `pvc`: the size of the claim the file also declares; None: it exists already.
    pvc_size: str | None = None
    tensorboard: bool = False
    restart_policy: str = "ExitCode"
    backoff_limit: int = 3
    ttl: int | None = None
    extra_args: tuple[str, ...] = field(default_factory=tuple)


def render(choices: Choices, invocation: str) -> str:
    """The TFJob YAML for `choices`; raises ScaffoldError for an impossible combination."""
    _check(choices)
    environment = jinja2.Environment(
        loader=jinja2.FunctionLoader(_template_source),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    environment.filters["quote"] = _quote
    environment.filters["comment"] = _comment
    args = _args(choices)
    text = environment.get_template("tfjob.yaml.j2").render(
        title=_title(choices),
        builtin=choices.command == ("tfjob-train",) and "--entrypoint" not in args,
        invocation=invocation,
        name=choices.name,
        namespace=choices.namespace,
        strategy=choices.strategy,
        backoff_limit=choices.backoff_limit,
        ttl=choices.ttl,
        restart_policy=choices.restart_policy,
        replicas=_replicas(choices),
        image=choices.image,
        command=list(choices.command),
        args=args,
        shared_dir=choices.shared_dir,
        pvc=choices.pvc,
        pvc_size=choices.pvc_size,
        log_dir=f"{SHARED_RUN_DIR}/logs" if choices.tensorboard else None,
    )
    return text


def validate_rendered(text: str) -> None:
    """The controller's own validation of what was rendered (the TFJob, its last
    document): a scaffold is never invalid."""
    document = [d for d in yaml.safe_load_all(text) if d][-1]
    parse_spec(document["metadata"]["name"], document["spec"])


def _check(choices: Choices) -> None:
    if not DNS_1035.match(choices.name):
        raise ScaffoldError(
            f"name {choices.name!r}: use lowercase letters, digits and '-', starting with a letter"
        )
    if choices.strategy not in STRATEGIES:
        raise ScaffoldError(f"--strategy must be one of {', '.join(STRATEGIES)}")
    if choices.workers < 1:
        raise ScaffoldError("--workers must be at least 1")
    if choices.strategy == "pss" and choices.ps < 1:
        raise ScaffoldError("ParameterServerStrategy needs --ps 1 or more")
    if choices.strategy == "mwms" and choices.ps:
        raise ScaffoldError("MultiWorkerMirroredStrategy has no parameter servers: drop --ps")
    if choices.gpus < 0 or choices.ps < 0 or choices.backoff_limit < 0:
        raise ScaffoldError("--gpus, --ps and --backoff-limit cannot be negative")
    if not choices.command:
        raise ScaffoldError("--command cannot be empty")
    if choices.pvc is not None and choices.shared_dir is not None:
        raise ScaffoldError("--pvc and --shared-dir both mount /shared: choose one")
    if choices.shared_dir is not None and not choices.shared_dir.startswith("/"):
        raise ScaffoldError(f"--shared-dir {choices.shared_dir!r}: not an absolute path")
    if choices.pvc is not None and not DNS_1123_SUBDOMAIN.match(choices.pvc):
        raise ScaffoldError(f"--pvc {choices.pvc!r}: not a valid claim name")
    if choices.pvc_size is not None and choices.pvc is None:
        raise ScaffoldError("--pvc-size needs --pvc NAME: the claim it sizes")
    if choices.pvc_size is not None and not QUANTITY.match(choices.pvc_size):
        raise ScaffoldError(f"--pvc-size {choices.pvc_size!r}: not a quantity (e.g. 5Gi)")
    if choices.tensorboard and len(choices.name) > MAX_CHILD_NAME - len("-tensorboard"):
        raise ScaffoldError(f"name too long for --tensorboard: {choices.name}-tensorboard")
    longest = f"{choices.name}-evaluator-0" if choices.evaluator else f"{choices.name}-worker-0"
    if len(longest) > MAX_CHILD_NAME:
        raise ScaffoldError(f"name too long: {longest!r} must fit {MAX_CHILD_NAME} characters")


def _replicas(choices: Choices) -> list[dict[str, Any]]:
    pss = choices.strategy == "pss"
    replicas = []
    if choices.chief or pss:
        replicas.append(
            {
                "type": "Chief",
                "count": 1,
                "gpus": 0 if pss else choices.gpus,
                "comment": "The coordinator: runs the training loop, writes checkpoints "
                "and the model."
                if pss
                else "Trains like a worker and also writes checkpoints and the model.",
            }
        )
    replicas.append(
        {
            "type": "Worker",
            "count": choices.workers,
            "gpus": choices.gpus,
            "comment": "Run the steps the coordinator sends; they never exit on their own."
            if pss
            else "Synchronous all-reduce replicas; worker 0 leads when there is no Chief.",
        }
    )
    if pss:
        replicas.append(
            {
                "type": "PS",
                "count": choices.ps,
                "gpus": 0,
                "comment": "Parameter servers hold the variables; they never exit on their own.",
            }
        )
    if choices.evaluator:
        replicas.append(
            {
                "type": "Evaluator",
                "count": 1,
                "gpus": 0,
                "comment": "Evaluates each checkpoint as it appears, exits after the final one.",
            }
        )
    return replicas


def _args(choices: Choices) -> list[str]:
    if choices.args is not None:
        return [*choices.args, *choices.extra_args]
    logs = ["--log-dir", f"{SHARED_RUN_DIR}/logs"] if choices.tensorboard else []
    return [
        "--model-dir",
        f"{SHARED_RUN_DIR}/model",
        "--checkpoint-dir",
        f"{SHARED_RUN_DIR}/checkpoints",
        *logs,
        *choices.extra_args,
    ]


def _title(choices: Choices) -> str:
    if (
        choices.strategy == "mwms"
        and choices.workers == 1
        and not choices.chief
        and choices.gpus > 1
    ):
        # One task with several GPUs: the trainer mirrors the model on each of them.
        return f"MirroredStrategy: 1 worker with {choices.gpus} GPUs, one model replica per GPU" + (
            ", an evaluator" if choices.evaluator else ""
        )
    parts = [f"{STRATEGIES[choices.strategy]}: {choices.workers} worker(s)"]
    if choices.strategy == "pss":
        parts.append(f"{choices.ps} parameter server(s) and a coordinator")
    elif choices.chief:
        parts.append("a chief")
    if choices.evaluator:
        parts.append("an evaluator")
    if choices.gpus:
        parts.append(f"{choices.gpus} GPU(s) per training replica")
    return ", ".join(parts)


def _quote(value: object) -> str:
    return json.dumps(str(value))


def _comment(value: object) -> str:
    """Text for a YAML comment: control characters escaped, so it stays on its line."""
    return json.dumps(str(value))[1:-1]


def _template_source(name: str) -> str:
    return resources.files("tfjob_operator").joinpath("templates", name).read_text()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="TFJob name (also the prefix of its pods)")
    parser.add_argument("--strategy", choices=sorted(STRATEGIES), default="mwms")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ps", type=int, default=None, help="parameter servers (pss: default 1)")
    parser.add_argument("--chief", action="store_true", help="add a Chief (always with pss)")
    parser.add_argument("--evaluator", action="store_true", help="add a sidecar evaluator")
    parser.add_argument("--gpus", type=int, default=0, help="nvidia.com/gpu per training replica")
    parser.add_argument(
        "--image",
        default=None,
        help=f"container image (default: {trainer_image()}; with --gpus, "
        f"{trainer_image(gpu=True)}, built with tensorflow[and-cuda])",
    )
    parser.add_argument("--command", default="tfjob-train", help="container command (shell words)")
    parser.add_argument(
        "--args", default=None, help="container args (shell words); default: model/checkpoint dirs"
    )
    parser.add_argument("--train-arg", action="append", default=[], help="extra arg, repeatable")
    parser.add_argument("--namespace", default=None)
    parser.add_argument(
        "--shared-dir",
        default=None,
        help="a host dir mounted at /shared (one node only; Pod Security baseline and "
        "restricted refuse it); default: each pod's own emptyDir, unless --pvc",
    )
    parser.add_argument(
        "--pvc",
        default=None,
        metavar="NAME",
        help="mount this PersistentVolumeClaim at /shared (model, checkpoints, logs)",
    )
    parser.add_argument(
        "--pvc-size",
        default=None,
        metavar="SIZE",
        help="also declare the --pvc claim, this size (e.g. 5Gi), in the default StorageClass",
    )
    parser.add_argument(
        "--tensorboard",
        action="store_true",
        help="write TensorBoard logs (--log-dir) and run a TensorBoard with the job",
    )
    parser.add_argument(
        "--restart-policy", default="ExitCode", choices=["ExitCode", "OnFailure", "Never"]
    )
    parser.add_argument("--backoff-limit", type=int, default=3)
    parser.add_argument("--ttl", type=int, default=None, help="ttlSecondsAfterFinished")
    parser.add_argument("-o", "--output", default="-", help="file to write ('-': stdout)")


def choices(name: str, **chosen: Any) -> Choices:
    """Choices with the defaults that depend on other choices: one parameter server for
    ParameterServerStrategy, the GPU trainer image when GPUs are asked for."""
    if chosen.get("ps") is None:
        chosen["ps"] = 1 if chosen.get("strategy") == "pss" else 0
    if chosen.get("image") is None:
        chosen["image"] = trainer_image(gpu=chosen.get("gpus", 0) > 0)
    return Choices(name=name, **chosen)


def choices_from(args: argparse.Namespace) -> Choices:
    return choices(
        args.name,
        strategy=args.strategy,
        workers=args.workers,
        ps=args.ps,
        chief=args.chief,
        evaluator=args.evaluator,
        gpus=args.gpus,
        image=args.image,
        command=tuple(shlex.split(args.command)),
        args=tuple(shlex.split(args.args)) if args.args is not None else None,
        namespace=args.namespace,
        shared_dir=args.shared_dir,
        pvc=args.pvc,
        pvc_size=args.pvc_size,
        tensorboard=args.tensorboard,
        restart_policy=args.restart_policy,
        backoff_limit=args.backoff_limit,
        ttl=args.ttl,
        extra_args=tuple(args.train_arg),
    )
