"""README.md's surface table is the one `manage.py surface_table` writes from the code
(responses_api/protocol/surface.py): a change to the classification changes the README too."""

from __future__ import annotations

from pathlib import Path

from responses_api.protocol import surface

README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_readme_table_is_the_codes() -> None:
    text = README.read_text()
    assert surface.with_tables(text) == text, "README.md's surface table is out of date: run `manage.py surface_table`"


def test_the_table_has_a_row_for_every_entry() -> None:
    rows = surface.markdown_tables()
    tables: list[dict] = [
        surface.REQUEST_FIELDS,
        surface.CHAT_FIELDS,
        surface.TOOL_TYPES,
        surface.INPUT_ITEM_TYPES,
        surface.OUTPUT_ITEM_TYPES,
        surface.CLIENT_EVENTS,
        surface.SERVER_EVENTS,
    ]
    for table in tables:
        for name in table:
            assert f"| `{name}` |" in rows, name
