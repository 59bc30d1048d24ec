"""service/errors.py: the one base error, which the ``changejoin`` command catches in one place.
(That every error class derives from it: tests/service/test_structure.py; the CLI's messages and
exit codes: tests/service/test_cli.py and test_config.py, unchanged.)"""
from __future__ import annotations

import pytest

from service import cli
from service.config import ConfigError
from service.contact import ServerError
from service.errors import ChangejoinError
from service.plan import PlanError


def test_a_refusal_is_one_line_and_its_details_indented():
    err = PlanError("JOIN_SQL: LATERAL is not supported\n   supported: ...\n\n see docs/sql.md#joins  ")
    assert err.refusal() == "changejoin: JOIN_SQL: LATERAL is not supported\n  supported: ...\n  see docs/sql.md#joins"
    assert (err.exit_code, ConfigError("x").exit_code, ServerError("V", "a", "b", "c").exit_code) == (2, 2, 1)
    assert ConfigError("invalid configuration:\n  A: bad\n    detail").refusal() == \
        "changejoin: invalid configuration:\n  A: bad\n    detail"  # as written: its lines are indented already
    assert isinstance(ConfigError("x"), ValueError) and isinstance(ServerError("V", "a", "b", "c"), RuntimeError)


@pytest.mark.parametrize("error, code, said", [
    (ServerError("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1", "connection refused", "CONNECTION"), 1,
     "changejoin: KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1: connection refused\n"),
    (PlanError("LEFT_PRIMARY_KEY: no column id\nthe columns: a, b"), 2,
     "changejoin: LEFT_PRIMARY_KEY: no column id\n  the columns: a, b\n"),
])
def test_the_command_catches_every_users_error_in_one_place(monkeypatch, capsys, error, code, said):
    """An error a user must act on ends any command with its one line and its class's exit status,
    never a traceback (a ServerError escaping a command was a traceback before)."""
    def failing(args):
        raise error

    monkeypatch.setattr(cli, "cmd_schema", failing)
    assert cli.main(["schema"]) == code
    assert capsys.readouterr().err == said


def test_another_exception_is_not_swallowed(monkeypatch):
    def failing(args):
        raise KeyError("a bug")

    monkeypatch.setattr(cli, "cmd_schema", failing)
    with pytest.raises(KeyError):
        cli.main(["schema"])
    assert not issubclass(KeyError, ChangejoinError)
