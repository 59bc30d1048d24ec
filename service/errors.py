"""The one base of every error a user can cause or must act on.

Each error class the service raises for a user to read (a refused configuration, a plan the inputs
do not allow, a server that does not answer, a checkpoint made for another join, a record that
becomes a dead letter, ...) derives from :class:`ChangejoinError`, after the built-in class it
already was (``ValueError``, ``RuntimeError``), so that existing ``except`` clauses keep working.
The ``changejoin`` command catches it in one place (``service/cli.py``'s ``main``): what it prints
(:meth:`ChangejoinError.refusal`) and its exit status (``exit_code``) belong to the error's class.

It imports nothing, so that every module of the service may derive from it, the SQL front end
and the lookup database included.
"""
from __future__ import annotations


class ChangejoinError(Exception):
    """An error a user reads: its message says what is wrong and what to do.

    ``exit_code``: the ``changejoin`` command's exit status when this error stops it: 2 where the
    configuration must change, 1 otherwise."""

    exit_code = 1

    def refusal(self) -> str:
        """The error as the ``changejoin`` command prints it: ``changejoin: <what is wrong>`` and
        its further lines indented (a SQL refusal: what is supported, the docs/sql.md section)."""
        lines = [line.strip() for line in str(self).strip().splitlines() if line.strip()]
        return "\n".join([f"changejoin: {lines[0] if lines else type(self).__name__}"] + [f"  {line}" for line in lines[1:]])
