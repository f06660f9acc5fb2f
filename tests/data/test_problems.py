"""Problem rows and the resumable JSONL output shared by `prmkit label` and `prmkit search`."""

import json

import pytest

from prmkit.data.problems import AppendedJsonl, problem_gold, problem_text, read_problem_rows
from prmkit.errors import PRMError


def test_problem_field_is_found_or_named():
    assert problem_text({"question": "1+1?"}, None, "{}") == "1+1?"
    assert problem_text({"prompt": "a", "question": "b"}, None, "{}") == "a"  # the first of PROBLEM_FIELDS
    assert problem_text({"q": "b"}, "q", "{}") == "b"
    with pytest.raises(PRMError, match=r"'prompt/problem/question': missing.*keys here: x"):
        problem_text({"x": 1}, None, "{}")
    with pytest.raises(PRMError, match="non-empty string"):
        problem_text({"prompt": "  "}, None, "{}")
    with pytest.raises(PRMError, match=r"field '-': expected an object such as \{\"p\"\}, got list"):
        problem_text([], None, '{"p"}')


def test_gold_answers_required_or_optional():
    assert problem_gold({"answer": "Half of it.\n#### 18"}, None, required=True) == "18"
    assert problem_gold({"gold_answer": None, "answer": 7}, None, required=True) == "7"
    assert problem_gold({}, None, required=False) is None
    assert problem_gold({"answer": None}, "answer", required=False) is None  # named and present but null
    with pytest.raises(PRMError, match="labels are measured against a gold answer"):
        problem_gold({}, None, required=True)
    with pytest.raises(PRMError, match=r"'ans': missing \(--gold-field names it\)"):
        problem_gold({}, "ans", required=False)
    with pytest.raises(PRMError, match="string or a number"):
        problem_gold({"answer": True}, None, required=False)
    with pytest.raises(PRMError, match="the gold answer is empty"):
        problem_gold({"answer": " "}, None, required=True)
    assert problem_gold({"answer": " "}, None, required=False) is None


def test_every_bad_row_is_reported_at_once(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a"}\n{"x": 1}\n{"prompt": "b"}\n{"prompt": ""}\n')
    with pytest.raises(PRMError) as err:
        read_problem_rows(path, lambda n, v: (n, problem_text(v, None, "{}")), limit=None, purpose="read",
                          expected="problems")
    message = str(err.value)
    assert "2 of 4 rows cannot be read" in message and "row 2," in message and "row 4," in message
    parsed = read_problem_rows(path, lambda n, v: (n, v["prompt"]), limit=1, purpose="read", expected="problems")
    assert parsed == [(1, "a")]
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(PRMError, match="no rows; give a file with problems"):
        read_problem_rows(tmp_path / "empty.jsonl", lambda n, v: v, limit=None, purpose="read", expected="problems")


def test_a_torn_last_line_is_truncated_and_appends_continue(tmp_path):
    path = tmp_path / "out.jsonl"
    out = AppendedJsonl(path, holds="one row per problem")
    out.append([{"row": 1}, {"row": 2}])
    with path.open("a") as handle:
        handle.write('{"row": 3, "cut')  # a kill in the middle of a write
    again = AppendedJsonl(path, holds="one row per problem")
    assert [json.loads(line)["row"] for _, line in again.lines()] == [1, 2] and again.truncated
    again.append([{"row": 3}])
    assert [json.loads(line)["row"] for line in path.read_text().splitlines()] == [1, 2, 3]
    assert list(AppendedJsonl(path, holds="x", overwrite=True).lines()) == []
    with pytest.raises(PRMError, match="give a .jsonl path"):
        AppendedJsonl(tmp_path / "out.json", holds="one row per problem")
