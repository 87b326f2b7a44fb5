"""Whether results.json holds every record of the document in memory."""

from __future__ import annotations

import json

import pytest

from attnbench.study.saved import unsaved


def document(**counts: int) -> dict:
    return {"sections": {name: {"records": [{}] * n} for name, n in counts.items()}}


def test_a_file_holding_as_many_records_per_section_is_saved(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(document(params=2, kvmem=3)))
    assert not unsaved(path, document(params=2, kvmem=3))
    assert not unsaved(path, document(params=2))  # a section it has more of is not lost
    assert not unsaved(path, None)


@pytest.mark.parametrize("memory", [document(params=2, kvmem=4), document(params=2, decode=1)])
def test_a_section_with_another_count_or_missing_is_unsaved(tmp_path, memory):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(document(params=2, kvmem=3)))
    assert unsaved(path, memory)


@pytest.mark.parametrize("text", [None, "", "{not json", "[]", '{"sections": {"params": 1}}'])
def test_a_file_missing_or_not_a_studys_is_unsaved(tmp_path, text):
    path = tmp_path / "results.json"
    if text is not None:
        path.write_text(text)
    assert unsaved(path, document(params=1))
