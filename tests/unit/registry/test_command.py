"""`pallas registry`: flags and the failures it reports in one line."""

from __future__ import annotations

import argparse

import pytest

from pallas_api.fields import HttpLimits
from pallas_api.spec import PallasDeploymentSpec
from pallas_io.commands import http_limits
from pallas_operator.builders.registry import http_limit_args
from pallas_registry.command import DEFAULT_PORT, RegistryCommand
from pallas_runtime import cli


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    RegistryCommand().configure(parser)
    return parser.parse_args(argv)


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PALLAS_NAMESPACE", raising=False)
    monkeypatch.delenv("PALLAS_DEPLOYMENT", raising=False)
    args = parse()
    assert (args.namespace, args.deployment, args.port, args.host) == (None, None, DEFAULT_PORT, "0.0.0.0")


def test_environment_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PALLAS_NAMESPACE", "agents")
    monkeypatch.setenv("PALLAS_DEPLOYMENT", "ouranos")
    args = parse()
    assert (args.namespace, args.deployment) == ("agents", "ouranos")
    assert parse("--namespace", "x").namespace == "x"


def test_registered_as_a_pallas_command() -> None:
    assert "registry" in cli._discovered_commands()


def test_without_credentials_it_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    assert RegistryCommand().run(parse("--namespace", "agents")) == 1
    assert capsys.readouterr().err.startswith("pallas registry: no Kubernetes credentials:")


@pytest.mark.parametrize(
    ("command", "flag", "required"),
    [
        ("registry", "--port", []),
        ("agent", "--port", ["--config", "a.yaml"]),
        ("operator", "--http-port", []),
        ("run", "--base-port", ["-f", "a.yaml"]),
    ],
)
def test_every_command_refuses_a_bad_port_the_same_way(
    command: str, flag: str, required: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main([command, *required, flag, "70000"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (
        f"pallas {command}: argument {flag}: 70000 is not a TCP port number (0-65535) "
        f"(see pallas {command} --help)\n"
    )


def test_the_http_limit_flags_are_what_the_operator_renders() -> None:
    assert http_limits(parse()) == HttpLimits()
    spec = PallasDeploymentSpec.model_validate(
        {
            "model": {"default": "p.m"},
            "providers": {"p": {"type": "openai"}},
            "http": {
                "maxHeadBytes": 65536,
                "maxHeaders": 20,
                "headTimeoutSeconds": 2.5,
                "keepAliveSeconds": 30,
            },
        }
    )
    assert http_limits(parse(*http_limit_args(spec))) == spec.http


@pytest.mark.parametrize("command", ["registry", "operator"])
def test_a_limit_out_of_range_is_one_line_naming_the_flag(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    assert cli.main([command, "--max-head-bytes", "10", "--head-timeout", "0"]) == 2
    assert capsys.readouterr().err == (
        f"pallas {command}: --max-head-bytes: Input should be greater than or equal to 1024; "
        "--head-timeout: Input should be greater than 0\n"
    )
