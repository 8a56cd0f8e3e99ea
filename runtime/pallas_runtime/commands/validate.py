"""`pallas validate -f FILE...`: the cluster's checks of manifests, offline, for CI and pre-commit.

The checks are `pallas_api.checks` (the spec models, the CRDs' CEL rules, the operator's
reference and cycle checks); this module reads the files and prints. Problems go to stdout, one
`FILE:LINE: Kind/name: field: problem` a line, so a script or an editor can read them; notes (the
objects skipped, the summary) go to stderr. Exit 0 when every object is valid, 1 when there are
problems, 2 when a file cannot be read or is not YAML.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import yaml

from pallas_api.checks import Document, check_documents
from pallas_io.commands import EXIT_FAILURE, EXIT_OK, EXIT_USAGE

STDIN = "-"
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


class UnreadableError(Exception):
    """A file that cannot be read or parsed; the text names it (and the line)."""


def parse_documents(text: str, name: str) -> list[Document]:
    """Every YAML document of `text`, each named `name:LINE` by the line it starts on.

    Raises:
        UnreadableError: the text is not YAML (the message gives the line of the error).
    """
    loader = yaml.SafeLoader(text)
    documents = []
    try:
        while loader.check_node():
            node = loader.get_node()
            assert node is not None  # check_node said there is one
            documents.append(Document(f"{name}:{node.start_mark.line + 1}", loader.construct_document(node)))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        raise UnreadableError(f"{name}{line}: not valid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise UnreadableError(f"{name}: not valid YAML: {exc}") from None
    finally:
        loader.dispose()
    return documents


def _files(arguments: Iterable[str]) -> list[str]:
    """The files named, a directory standing for its manifest files (not recursive, by name)."""
    files = []
    for argument in arguments:
        path = Path(argument)
        if argument != STDIN and path.is_dir():
            files += sorted(str(p) for p in path.iterdir() if p.suffix in MANIFEST_SUFFIXES and p.is_file())
        else:
            files.append(argument)
    return files


def read_documents(arguments: Sequence[str]) -> list[Document]:
    """The documents of every file, directory or stdin (`-`) named, in order.

    Raises:
        UnreadableError: a file that cannot be read or is not YAML.
    """
    documents = []
    for file in _files(arguments):
        if file == STDIN:
            documents += parse_documents(sys.stdin.read(), "<stdin>")
            continue
        try:
            text = Path(file).read_text(encoding="utf-8")
        except OSError as exc:
            raise UnreadableError(f"{file}: cannot read ({exc.strerror})") from None
        except UnicodeDecodeError:
            raise UnreadableError(f"{file}: not UTF-8 text") from None
        documents += parse_documents(text, file)
    return documents


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


class ValidateCommand:
    """The `pallas validate` subcommand (a `pallas.commands` entry point)."""

    help = "check PallasDeployment/PallasAgent manifests offline, as the CRDs and the operator would"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        """Add the command's flags."""
        parser.add_argument(
            "-f",
            "--file",
            action="append",
            required=True,
            metavar="FILE",
            help="manifest file, directory of *.yaml/*.yml/*.json, or - for stdin (repeatable)",
        )

    def run(self, args: argparse.Namespace) -> int:
        """Check the files; print one line per problem."""
        try:
            report = check_documents(read_documents(args.file))
        except UnreadableError as exc:
            print(f"pallas validate: {exc}", file=sys.stderr)
            return EXIT_USAGE
        for skipped in report.skipped:
            print(f"pallas validate: note: {skipped}: not a Pallas kind, not checked", file=sys.stderr)
        for warning in report.warnings:
            print(f"pallas validate: warning: {warning}", file=sys.stderr)
        for problem in report.problems:
            print(problem)
        if report.problems:
            summary = f"{_plural(len(report.problems), 'problem')} in {_plural(report.checked, 'object')}"
            print(f"pallas validate: {summary}", file=sys.stderr)
            return EXIT_FAILURE
        print(f"pallas validate: {_plural(report.checked, 'object')} valid", file=sys.stderr)
        return EXIT_OK
