"""What the tests share: fixtures, fakes, harnesses, mappers for Spark's workers. A test imports
them as ``tests.support.<module>``, never by a bare name (tests/service/test_structure.py)."""
