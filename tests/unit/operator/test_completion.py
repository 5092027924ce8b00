"""Shell completion's engine (client/completion.py) on the CLI's real parser, with the
TFJobs' names given; the scripts in real shells against an API server:
tests/integration/test_cli_completion.py."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

import pytest

from tfjob_operator import cli
from tfjob_operator.client.completion import FILES, NO_FILES, Completion, Where, complete, script

PARSER = cli.build_parser()


class Names:
    """TFJob names by namespace; remembers where it was asked."""

    def __init__(self) -> None:
        self.asked: list[Where] = []

    def __call__(self, where: Where) -> Sequence[str]:
        self.asked.append(where)
        return {"team": ["mnist", "mwms", "resnet"]}.get(where.namespace or "default", ["own"])


def candidates(*words: str) -> tuple[str, ...]:
    return complete(PARSER, words, Names()).candidates


def test_the_first_word_is_a_command_and_the_hidden_one_is_not_offered() -> None:
    assert candidates("") == (
        "completion", "delete", "describe", "get", "logs", "new", "render", "run", "submit",
        "tensorboard", "version", "wait",
    )  # fmt: skip
    assert candidates("de") == ("delete", "describe")
    assert candidates("__") == ()
    assert candidates("nosuch", "") == ()


def test_options_and_their_choices_complete() -> None:
    assert candidates("get", "--") == (
        "--all-namespaces", "--context", "--help", "--kubeconfig", "--namespace", "--output",
    )  # fmt: skip
    assert candidates("get", "-o", "") == ("table", "yaml", "json")
    assert candidates("get", "--output", "y") == ("yaml",)
    assert candidates("wait", "mnist", "--for", "S") == ("Succeeded", "Suspended")
    assert candidates("completion", "") == ()
    assert candidates("completion", "--h") == ("--help",)


def test_paths_are_left_to_the_shell() -> None:
    for words in (("submit", "-f", ""), ("get", "--kubeconfig", "/tm")):
        assert complete(PARSER, words, Names()) == Completion((), FILES)
    assert complete(PARSER, ("get", "-n", ""), Names()) == Completion((), NO_FILES)


def test_a_jobs_name_completes_from_the_namespace_and_cluster_the_words_name() -> None:
    names = Names()
    assert complete(PARSER, ("logs", "m"), names).candidates == ()
    assert complete(PARSER, ("logs", ""), names).candidates == ("own",)
    words = ("describe", "-n", "team", "--kubeconfig", "/k", "--context=c", "m")
    assert complete(PARSER, words, names).candidates == ("mnist", "mwms")
    assert complete(PARSER, ("get", "--namespace=team", ""), names).candidates == (
        "mnist", "mwms", "resnet",
    )  # fmt: skip
    assert names.asked == [Where(), Where(), Where("team", "/k", "c"), Where("team")]
    # A flag that takes no value does not eat the name; after the name, nothing is asked.
    assert candidates("delete", "--wait", "-n", "team", "r") == ("resnet",)
    names.asked.clear()
    assert complete(PARSER, ("delete", "mnist", ""), names).candidates == ()
    assert names.asked == []


def test_the_output_is_cobras_format_that_kubectl_reads() -> None:
    assert Completion(("a", "b")).lines() == "a\nb\n:4\n"
    assert Completion((), FILES).lines() == ":0\n"


def test_the_cli_prints_candidates_and_scripts(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["__complete", "get", "-o", "j"]) == 0
    assert capsys.readouterr().out == "json\n:4\n"
    assert cli.main(["completion", "bash"]) == 0
    bash = capsys.readouterr().out
    assert bash == script("bash")
    assert "complete -F _tfjob_operator tfjob-operator" in bash
    checked = subprocess.run(["bash", "-n"], input=bash, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    assert cli.main(["completion", "zsh"]) == 0
    assert capsys.readouterr().out.startswith("#compdef tfjob-operator\n")
    with pytest.raises(SystemExit):
        cli.main(["completion", "fish"])


def test_kubectls_plugin_says_its_own_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"], prog=cli.KUBECTL_PROG)
    assert capsys.readouterr().out.startswith("usage: kubectl tfjob [-h]")
