"""Problem rows and the resumable JSONL output shared by `prmkit label` and `prmkit search`."""

import json
from dataclasses import dataclass

import pytest

from prmkit.data.problems import AppendedJsonl, ResumableRows, problem_gold, problem_text, read_problem_rows
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


@dataclass(frozen=True)
class Item:
    row: int
    text: str


class Lines(ResumableRows):
    """A command's output as the three commands use the base: settings nested in each line, one line per row."""

    tool = "prmkit test"
    holds = "one line per problem"
    made = "sampled"
    needs = ("row", "settings")

    def drawn_by(self, record):
        return record["settings"] if isinstance(record["settings"], dict) else None

    def other_row(self, record, item):
        return None if item is None or item.text == record.get("prompt") else "another problem"


ITEMS = [Item(1, "2 + 2"), Item(2, "3 + 3")]
SETTINGS = {"k": 2, "policy": "tiny"}


def write_lines(path, *lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def line(row, prompt, settings=SETTINGS):
    return json.dumps({"row": row, "prompt": prompt, "settings": settings})


def test_resumed_lines_are_kept_by_row_and_append_updates_done(tmp_path):
    path = tmp_path / "out.jsonl"
    out = Lines(path, SETTINGS, ITEMS)
    assert out.done == {}
    out.append([{"row": 1, "prompt": "2 + 2", "settings": SETTINGS}])
    assert out.done == {1: {"row": 1, "prompt": "2 + 2", "settings": SETTINGS}}
    with path.open("a") as handle:
        handle.write(line(2, "3 + 3")[:20])  # a kill in the middle of a write: that line is redone
    again = Lines(path, SETTINGS, ITEMS)
    assert set(again.done) == {1} and again.truncated
    again.append([json.loads(line(2, "3 + 3"))])
    assert set(again.done) == {1, 2} and set(Lines(path, SETTINGS, ITEMS).done) == {1, 2}
    assert Lines(path, {"k": 9}, ITEMS, overwrite=True).done == {}


def test_done_keys_and_kept_lines_follow_the_subclass(tmp_path):
    class Solutions(Lines):
        needs = ("row", "solution_index", "settings")
        keeps_lines = False

        def key(self, record):
            return record["row"], record["solution_index"]

    path = tmp_path / "out.jsonl"
    write_lines(path, json.dumps({"row": 1, "solution_index": 0, "prompt": "2 + 2", "settings": SETTINGS}))
    out = Solutions(path, SETTINGS, ITEMS)
    out.append([{"row": 1, "solution_index": 1, "prompt": "2 + 2", "settings": SETTINGS}])
    assert out.done == {(1, 0): None, (1, 1): None}


@pytest.mark.parametrize("raw, why", [
    (b"not json at all", "not JSON"),
    (b"\xff\xfe", "not JSON"),  # bytes that are not UTF-8 fail the same way, not with a UnicodeDecodeError
    (b"[1, 2]", "not an object with row and settings"),
    (json.dumps({"row": 1, "prompt": "2 + 2"}).encode(), "not an object with row and settings"),
    (json.dumps({"row": "1", "settings": SETTINGS}).encode(), "not an object with row and settings"),
    (json.dumps({"row": 1, "settings": "k=2"}).encode(), "not an object with row and settings"),
])
def test_a_line_the_command_did_not_write_is_refused(tmp_path, raw, why):
    path = tmp_path / "out.jsonl"
    path.write_bytes(line(1, "2 + 2").encode() + b"\n" + raw + b"\n")
    with pytest.raises(PRMError) as err:
        Lines(path, SETTINGS, ITEMS)
    assert str(err.value) == (f"{path}: line 2 is not a record written by prmkit test ({why}); give another output "
                              f"path, or pass --overwrite to start {path} afresh")


def test_a_line_from_other_settings_is_refused_naming_what_differs(tmp_path):
    path = tmp_path / "out.jsonl"
    write_lines(path, line(1, "2 + 2"), line(2, "3 + 3", {"k": 4, "policy": "tiny", "seed": 0}))
    with pytest.raises(PRMError) as err:
        Lines(path, SETTINGS, ITEMS)
    assert str(err.value) == (f"{path}: line 2 was sampled with other settings (k: 4 there, 2 now, seed: 0 there, "
                              f"not set now); run with the same settings to continue it, or give another output "
                              f"path, or pass --overwrite to start {path} afresh")

    class Named(Lines):  # settings too long to show: their names only
        show_values = False

    with pytest.raises(PRMError, match=r"line 2 was sampled with other settings \(k, seed differ\); run with"):
        Named(path, SETTINGS, ITEMS)


def test_a_line_for_another_problem_at_its_row_is_refused(tmp_path):
    path = tmp_path / "out.jsonl"
    write_lines(path, line(1, "2 + 2"), line(2, "5 + 5"))
    with pytest.raises(PRMError) as err:
        Lines(path, SETTINGS, ITEMS)
    assert str(err.value) == (f"{path}: line 2 holds another problem than row 2 of the input; continue it with the "
                              f"input it was made from, or give another output path, or pass --overwrite to start "
                              f"{path} afresh")
    # a row the input does not have is the subclass's call: this one keeps it (a smaller --limit)
    write_lines(path, line(1, "2 + 2"), line(7, "anything"))
    assert set(Lines(path, SETTINGS, ITEMS).done) == {1, 7}
