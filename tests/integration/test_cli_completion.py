"""The CLI as a user's shell and kubectl run it, against the real API server: kubectl's
plugin mechanism finds `kubectl-tfjob` on PATH; Tab in bash and zsh (the scripts of
`tfjob-operator completion`), and in kubectl's own completion of plugins, completes a
TFJob's name from the namespace the words name. The engine alone:
tests/unit/operator/test_completion.py."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from support.builders import shell_replica, tfjob
from support.cluster import Kubectl
from support.tfjobs import TFJobs

from tfjob_localcluster.host import packages

#: The checkout's environment: `make env` installs the package's entry points there.
BIN = Path(sys.executable).parent
JOBS = ("mnist-a", "mnist-b", "resnet")


@pytest.fixture(scope="module")
def shell_env() -> dict[str, str]:
    """PATH with the checkout's entry points first, as a user's after `pip install`."""
    for command in ("tfjob-operator", "kubectl-tfjob", "kubectl_complete-tfjob"):
        assert (BIN / command).is_file(), f"{command} is not installed: run `make env`"
    return {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}


@pytest.fixture
def jobs(tfjobs: TFJobs) -> tuple[str, ...]:
    """Three suspended TFJobs in the test's namespace, which kubeconfig's context does not
    name."""
    for name in JOBS:
        tfjobs.create(
            tfjob(name, {"Worker": shell_replica("sleep 3600")}, runPolicy={"suspend": True})
        )
    return JOBS


def run_kubectl(kubectl: Kubectl, env: dict[str, str], *words: str) -> str:
    """The pinned kubectl with `env`'s PATH, as a user types it (kubectl finds a plugin by
    the words before any flag: its own flags go after them); its output."""
    done = subprocess.run(
        [str(kubectl.path), *words], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, f"kubectl {' '.join(words)}: {done.stderr}"
    return done.stdout


def test_kubectl_runs_the_plugin_from_path_and_completes_it(
    kubectl: Kubectl,
    kubeconfig: str,
    namespace: str,
    jobs: tuple[str, ...],
    shell_env: dict[str, str],
) -> None:
    where = ["-n", namespace, "--kubeconfig", kubeconfig]
    header, *rows = run_kubectl(kubectl, shell_env, "tfjob", "get", *where).splitlines()
    assert header.split()[:2] == ["NAME", "STATE"]
    assert [row.split()[0] for row in rows] == list(jobs)
    assert str(BIN / "kubectl-tfjob") in run_kubectl(kubectl, shell_env, "plugin", "list")
    usage = run_kubectl(kubectl, shell_env, "tfjob", "--help")
    assert usage.startswith("usage: kubectl tfjob"), usage
    # kubectl's own completion runs the plugin's (kubectl_complete-tfjob).
    words = ["tfjob", "describe", *where, "mn"]
    completed = run_kubectl(kubectl, shell_env, "__complete", *words)
    assert completed.splitlines() == ["mnist-a", "mnist-b", ":4"], completed


Completer = Callable[[dict[str, str], list[str]], list[str]]


def bash_completes(env: dict[str, str], words: list[str]) -> list[str]:
    """What Tab offers in bash for the last of `words` (after `tfjob-operator`)."""
    line = " ".join(shlex.quote(w) for w in ["tfjob-operator", *words])
    program = (
        "source <(tfjob-operator completion bash)\n"
        f"COMP_WORDS=({line}); COMP_CWORD={len(words)}\n"
        '_tfjob_operator; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", program],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line]


def zsh_completes(env: dict[str, str], words: list[str]) -> list[str]:
    """What Tab offers in zsh: the completion function run as the completion system runs
    it, its compadd replaced by one that prints what it is given."""
    line = " ".join(shlex.quote(w) for w in ["tfjob-operator", *words])
    program = (
        "autoload -U compinit && compinit -D -u\n"
        "source <(tfjob-operator completion zsh)\n"
        'compadd() { shift; print -rl -- "$@" }\n'
        "_files() { print -r -- FILES }\n"
        f"words=({line}); CURRENT={len(words) + 1}\n"
        "_tfjob_operator\n"
    )
    done = subprocess.run(
        ["zsh", "-f", "-c", program], env=env, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line]


@pytest.mark.parametrize("completes", [bash_completes, zsh_completes], ids=["bash", "zsh"])
def test_tab_in_bash_and_zsh_completes_commands_flags_and_jobs(
    completes: Completer,
    kubeconfig: str,
    namespace: str,
    jobs: tuple[str, ...],
    shell_env: dict[str, str],
    tmp_path: Path,
) -> None:
    if completes is zsh_completes:
        packages.ensure(["zsh"])
    env = {**shell_env, "HOME": str(tmp_path)}  # whatever a shell writes stays here
    where = ["-n", namespace, "--kubeconfig", kubeconfig]
    assert completes(env, ["de"]) == ["delete", "describe"]
    assert completes(env, ["get", "--o"]) == ["--output"]
    assert completes(env, ["get", "-o", "y"]) == ["yaml"]
    assert completes(env, ["logs", *where, ""]) == list(jobs)
    assert completes(env, ["wait", *where, "re"]) == ["resnet"]
    # A namespace with no TFJobs, and a cluster that cannot be reached: nothing, no error.
    assert completes(env, ["logs", "--kubeconfig", kubeconfig, "-n", "kube-system", ""]) == []
    assert completes(env, ["logs", "--kubeconfig", str(tmp_path / "none"), ""]) == []
    if completes is zsh_completes:
        assert completes(env, ["submit", "-f", ""]) == ["FILES"]
    else:
        (tmp_path / "job.yaml").write_text("{}")
        assert completes(env, ["submit", "-f", str(tmp_path / "jo")]) == [
            str(tmp_path / "job.yaml")
        ]
