"""The one wait for a server (``contact._wait_for``) that Kafka, the registry and the lookup
database share: an answer ends it, a refusal other than by the connection ends it at once, the
deadline ends it with one line, and the wait is logged once. The lines each server's wait gives
are pinned end to end by tests/integration/test_contact.py and test_cli_connect_timeouts.py."""
from __future__ import annotations

import logging

import pytest

from service import contact
from service.contact import CONNECTION, CREDENTIALS, ServerError, _Unanswered, _wait_for


def attempts(*answers):
    """An attempt that gives ``answers`` in turn, recording the seconds left it was given."""
    given = []

    def attempt(remaining: float):
        given.append(remaining)
        return answers[len(given) - 1]

    return attempt, given


def test_the_first_answer_ends_the_wait(caplog):
    attempt, given = attempts(_Unanswered(CONNECTION, "connection refused"), "the answer")
    with caplog.at_level(logging.WARNING, logger=contact.__name__):
        assert _wait_for("X_URL", "host:1", 3600, attempt, pause=0) == "the answer"
    assert len(given) == 2 and all(0 < left <= 3600 for left in given)
    assert [r.getMessage() for r in caplog.records] == [
        "X_URL=host:1 does not answer (connection refused); waiting up to 3600 s (CONNECT_TIMEOUT)"]


def test_a_refusal_other_than_by_the_connection_ends_the_wait_at_once():
    attempt, given = attempts(_Unanswered(CREDENTIALS, "the server refused the credentials"))
    with pytest.raises(ServerError) as raised:
        _wait_for("X_URL", "host:1", 3600, attempt)
    assert str(raised.value) == "X_URL=host:1: the server refused the credentials"
    assert (raised.value.variable, raised.value.kind, len(given)) == ("X_URL", CREDENTIALS, 1)


@pytest.mark.parametrize("cause, line", [
    ("connection refused", "X_URL=host:1: no answer within 0 s (CONNECT_TIMEOUT): connection refused"),
    (None, "X_URL=host:1: no answer within 0 s (CONNECT_TIMEOUT)"),
])
def test_the_deadline_ends_the_wait_with_one_line_naming_the_variable(cause, line, caplog):
    attempt, given = attempts(_Unanswered(CONNECTION, cause))
    with caplog.at_level(logging.WARNING, logger=contact.__name__), pytest.raises(ServerError) as raised:
        _wait_for("X_URL", "host:1", 0, attempt)
    assert str(raised.value) == line and raised.value.kind == CONNECTION and len(given) == 1
    assert caplog.records == []  # nothing waited for


def test_what_the_deadline_line_says_is_the_attempts():
    attempt, _ = attempts(_Unanswered(CONNECTION, None, "no broker answered"))
    with pytest.raises(ServerError, match=r"^K=b:9: no broker answered within 0 s \(CONNECT_TIMEOUT\)$"):
        _wait_for("K", "b:9", 0, attempt)
