"""changejoin's tests, one package: a test module is ``tests.<folder>.test_<what>``, and what the
tests share is ``tests.support.<module>``, imported by that name (docs/development.md, "Tests")."""
