"""Shell completion of `tfjob-operator` and `kubectl tfjob`, for bash and zsh.

One engine, in Python, that the shells ask on each Tab, as kubectl's own completion asks
`kubectl __complete`: what completes is what the installed version's parser takes, and a
TFJob's name completes from the API server. The shells' scripts are small and fixed.

- `tfjob-operator completion bash|zsh` prints the script to source;
- `tfjob-operator __complete WORD...` prints the candidates for the last WORD;
- `kubectl_complete-tfjob WORD...` is the same, for kubectl's completion of plugins
  (kubectl 1.26 and later run `kubectl_complete-<plugin>` from PATH).

Both print cobra's format, which kubectl reads: one candidate per line, then
`:<directive>`, 4 (no file names) or 0 (the shell completes file names).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: cobra's ShellCompDirective values that the engine gives.
FILES = 0
NO_FILES = 4
#: The options whose value is a file's path.
PATH_OPTIONS = frozenset({"--filename", "--kubeconfig"})
#: The positional that names a TFJob.
JOB_NAME = "name"


@dataclass(frozen=True)
class Where:
    """The cluster and namespace the words typed so far name (the defaults: None)."""

    namespace: str | None = None
    kubeconfig: str | None = None
    context: str | None = None


@dataclass(frozen=True)
class Completion:
    candidates: tuple[str, ...]
    directive: int = NO_FILES

    def lines(self) -> str:
        return "".join(f"{c}\n" for c in self.candidates) + f":{self.directive}\n"


def complete(
    parser: argparse.ArgumentParser,
    words: Sequence[str],
    job_names: Callable[[Where], Sequence[str]],
) -> Completion:
    """The candidates for the last of `words` (what follows the program's name; the last
    is the word being typed, "" for a new one). `job_names` lists the TFJobs of a
    namespace; it is asked only where a TFJob's name goes."""
    if not words:
        words = [""]
    *typed, current = words
    commands = _subcommands(parser)
    if not typed:
        return _matching(sorted(commands), current)
    command = commands.get(typed[0])
    if command is None:
        return Completion(())
    options = {o: a for a in command._actions for o in a.option_strings}
    positionals = [a for a in command._actions if not a.option_strings]
    values: dict[str, str] = {}
    given = 0
    pending: argparse.Action | None = None
    for word in typed[1:]:
        if pending is not None:
            values[pending.dest] = word
            pending = None
        elif word.startswith("-"):
            flag, equals, value = word.partition("=")
            action = options.get(flag)
            if action is not None and action.nargs != 0:
                if equals:
                    values[action.dest] = value
                else:
                    pending = action
        else:
            given += 1
    if pending is not None:
        if set(pending.option_strings) & PATH_OPTIONS:
            return Completion((), FILES)
        return _matching([str(c) for c in pending.choices or ()], current)
    if current.startswith("-"):
        return _matching(sorted(options), current)
    if given < len(positionals) and positionals[given].dest == JOB_NAME:
        where = Where(values.get("namespace"), values.get("kubeconfig"), values.get("context"))
        return _matching(sorted(job_names(where)), current)
    return Completion(())


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: dict[str, argparse.ArgumentParser] = action.choices
            return {name: p for name, p in found.items() if not name.startswith("_")}
    return {}


def _matching(candidates: Sequence[str], current: str) -> Completion:
    return Completion(tuple(c for c in candidates if c.startswith(current)))


BASH = """\
# bash completion of {prog}: source <({prog} completion bash)
_{function}() {{
    local cur=${{COMP_WORDS[COMP_CWORD]}} line directive=4
    local -a candidates=()
    while IFS= read -r line; do
        case $line in
            :*) directive=${{line#:}} ;;
            *) candidates+=("$line") ;;
        esac
    done < <("{command}" __complete "${{COMP_WORDS[@]:1:COMP_CWORD}}" 2>/dev/null)
    COMPREPLY=()
    if (( directive == 0 )); then
        mapfile -t COMPREPLY < <(compgen -f -- "$cur")
    elif (( ${{#candidates[@]}} )); then
        mapfile -t COMPREPLY < <(compgen -W "${{candidates[*]}}" -- "$cur")
    fi
}}
complete -F _{function} {prog}
"""

ZSH = """\
#compdef {prog}
# zsh completion of {prog}: source <({prog} completion zsh), after compinit
_{function}() {{
    local line directive=4
    local -a candidates
    for line in "${{(@f)$("{command}" __complete "${{(@)words[2,CURRENT]}}" 2>/dev/null)}}"; do
        case $line in
            :*) directive=${{line#:}} ;;
            ?*) candidates+=("$line") ;;
        esac
    done
    if (( directive == 0 )); then
        _files
    else
        compadd -- "${{candidates[@]}}"
    fi
}}
compdef _{function} {prog}
"""

SCRIPTS = {"bash": BASH, "zsh": ZSH}


def script(shell: str, prog: str = "tfjob-operator") -> str:
    """The completion script of `shell` for the command `prog`."""
    function = prog.replace("-", "_")
    return SCRIPTS[shell].format(prog=prog, function=function, command=prog)
