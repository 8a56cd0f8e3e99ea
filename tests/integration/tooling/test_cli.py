"""The `pallas` command's own behaviour (its subcommands are tested with their packages)."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from pallas_runtime import __version__, cli


class Echo:
    help = "say the word"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("word")

    def run(self, args: argparse.Namespace) -> int:
        print(args.word)
        return 7


def test_version_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"pallas {__version__}"


def test_no_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "usage: pallas" in capsys.readouterr().err


def test_commands_come_from_entry_points(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "_discovered_commands", lambda: {"echo": Echo})
    assert cli.main(["echo", "hello"]) == 7
    assert capsys.readouterr().out == "hello\n"


def test_unknown_command_names_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["no-such-command"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'no-such-command'" in capsys.readouterr().err


@pytest.mark.parametrize("module", ["pallas_runtime.cli", "pallas_runtime"])
def test_installed_program_runs(module: str) -> None:
    res = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True, text=True)
    assert res.returncode == 0
    assert res.stdout.startswith("pallas ")
