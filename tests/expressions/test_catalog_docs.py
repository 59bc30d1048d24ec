"""docs/sql.md's Functions section lists exactly what the catalog takes."""
import re
from pathlib import Path

from expressions.functions import describe_catalog
from expressions.parse import supported_names

SQL_MD = Path(__file__).resolve().parents[2] / "docs" / "sql.md"


def functions_section() -> str:
    text = SQL_MD.read_text()
    start = text.index("## Functions")
    return text[start:text.index("\n## ", start + 1)].replace("\\|", "|")


def test_every_function_and_operator_is_listed_with_its_signature():
    section = functions_section()
    missing = [signature for _, signature in describe_catalog()
               if not all(f"`{form}`" in section for form in re.split(r", (?=[A-Z_]+\(|a |s |-|CASE|NOT)", signature))]
    assert missing == []


def test_every_name_a_query_may_call_is_listed():
    section = functions_section()
    assert [name for name in supported_names() if not re.search(rf"`{re.escape(name)}\(", section)] == []
