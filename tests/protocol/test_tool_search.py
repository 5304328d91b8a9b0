"""Tool search's ranking and items, with plain data: 214 tools in listings modelled on eleven
public MCP servers (tests/fixtures/mcp_listings.json: GitHub, Slack, filesystem, Atlassian,
Notion, Stripe, Postgres, Google, Linear, Sentry, Kubernetes), where several servers share tool
names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from responses_api.protocol.errors import InvalidRequest
from responses_api.protocol.items import normalize_input
from responses_api.protocol.request import parse_create_request
from responses_api.protocol.tool_ranking import ToolIndex, tokens
from responses_api.protocol.tool_search import (
    SEARCH_DESCRIPTION,
    added_tools,
    as_function_items,
    call_arguments,
    found_in,
    search_description,
    tool_entries,
)
from responses_api.protocol.tools import Tool, make_tool

pytestmark = pytest.mark.embedded  # plain data: runs in the embedded (SQLite) pass too

LISTINGS = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "mcp_listings.json").read_text())


def _catalogue() -> tuple[list[Tool], dict[str, str]]:
    tools, groups = [], {}
    for label, listing in LISTINGS.items():
        for entry in listing:
            name = f"{label}__{entry['name']}"
            tool = make_tool(
                name=name,
                description=entry["description"],
                parameters=entry["input_schema"],
                strict=False,
                param=name,
                source="mcp",
            )
            tool.deferred = True
            tools.append(tool)
            groups[name] = label
    return tools, groups


@pytest.fixture(scope="module")
def index() -> ToolIndex:
    tools, groups = _catalogue()
    assert len(tools) >= 200
    return ToolIndex(tools, groups=groups)


def _names(found: list[Tool]) -> list[str]:
    return [t.name for t in found]


@pytest.mark.parametrize(
    ("query", "best"),
    [
        ("create github issue", "github__create_issue"),  # Linear has a create_issue too
        ("create a linear issue", "linear__create_issue"),
        ("post a message to a slack channel", "slack__slack_post_message"),
        ("kubernetes pod logs", "kubernetes__pods_log"),
        ("refund a payment", "stripe__create_refund"),
        ("merge pull request", "github__merge_pull_request"),
        ("resolve sentry issue", "sentry__update_issue"),
        ("top slowest queries", "postgres__get_top_queries"),
        ("send an email", "google__gmail_send_message"),
        ("jira sprint issues", "atlassian__jira_get_sprint_issues"),
        ("rename a file", "filesystem__move_file"),
    ],
)
def test_the_tool_a_task_needs_ranks_first(index: ToolIndex, query: str, best: str) -> None:
    assert _names(index.search(query))[0] == best


def test_a_search_returns_at_most_its_limit_and_nothing_for_no_match(index: ToolIndex) -> None:
    assert len(index.search("issue")) == 5
    assert len(index.search("issue", limit=12)) == 12
    assert index.search("xylophone zebra") == []
    assert index.search("the and of") == []  # stopwords only


def test_an_exact_tool_name_comes_first(index: ToolIndex) -> None:
    assert _names(index.search("github__list_tags"))[0] == "github__list_tags"


def test_parameter_names_count(index: ToolIndex) -> None:
    # "thread_ts" is only a parameter name: the Slack thread tools are found by it.
    assert set(_names(index.search("thread ts"))[:2]) == {
        "slack__slack_reply_to_thread",
        "slack__slack_get_thread_replies",
    }


def test_tokens_split_cases_and_strip_suffixes() -> None:
    assert tokens("getPullRequestFiles") == tokens("pull request file")
    assert tokens("list_issues") == tokens("listing issue") == ["list", "issu"]
    assert tokens("created updates") == tokens("create update")
    assert tokens("dry-run HTTPServer") == ["dry", "run", "http", "server"]
    assert tokens("access address") == ["access", "address"]  # "ss" is no plural


def test_found_tools_are_grouped_as_the_sdk_types_them() -> None:
    """Namespace members in their namespace, MCP tools as their server, functions as declared;
    the SDK parses the output item."""
    from openai.types.responses import ResponseToolSearchOutputItem

    req = parse_create_request(
        {
            "model": "m",
            "input": "hi",
            "tools": [
                {"type": "tool_search"},
                {"type": "function", "name": "weather", "description": "Weather", "defer_loading": True},
                {
                    "type": "namespace",
                    "name": "crm",
                    "description": "The CRM",
                    "tools": [
                        {"type": "function", "name": "find_contact", "defer_loading": True},
                        {"type": "function", "name": "add_note", "defer_loading": True},
                    ],
                },
            ],
        }
    )
    deferred = [t for t in req.tools if t.deferred]
    assert [t.name for t in deferred] == ["weather", "crm__find_contact", "crm__add_note"]
    mcp = make_tool(name="docs__search", description="Search docs", parameters=None, strict=False, param="x")
    entries = tool_entries(
        [deferred[1], deferred[0], mcp, deferred[2]], {"crm": "The CRM"}, {"docs__search": ("docs", "search")}
    )
    assert [e["type"] for e in entries] == ["namespace", "function", "mcp"]
    assert [m["name"] for m in entries[0]["tools"]] == ["find_contact", "add_note"]
    assert entries[2] == {"type": "mcp", "server_label": "docs", "allowed_tools": ["search"], "defer_loading": True}
    item = {"id": "tso_1", "type": "tool_search_output", "call_id": "c1", "execution": "server", "status": "completed"}
    parsed = ResponseToolSearchOutputItem.model_validate({**item, "tools": entries})
    assert parsed.tools[0].type == "namespace"
    # What the output loads, read back from the item (a chain continued later).
    loaded = found_in([{**item, "tools": entries}])
    assert list(loaded.names) == ["crm__find_contact", "crm__add_note", "weather"]
    assert loaded.mcp == [("docs", "search")]


def test_a_deferred_client_tool_needs_tool_search() -> None:
    body = {"model": "m", "input": "hi", "tools": [{"type": "function", "name": "f", "defer_loading": True}]}
    with pytest.raises(InvalidRequest) as caught:
        parse_create_request(body)
    assert caught.value.param == "tools"
    with pytest.raises(InvalidRequest) as caught:
        parse_create_request({**body, "tools": [{"type": "function", "name": "f", "defer_loading": "yes"}]})
    assert caught.value.param == "tools[0].defer_loading"
    with pytest.raises(InvalidRequest) as caught:
        parse_create_request({**body, "tools": [{"type": "tool_search", "execution": "elsewhere"}]})
    assert caught.value.param == "tools[0].execution"


def test_additional_tools_items_are_checked_and_load_their_tools() -> None:
    [item] = normalize_input(
        [{"type": "additional_tools", "role": "developer", "tools": [{"type": "function", "name": "late"}]}]
    )
    assert item["id"].startswith("adt_") and list(found_in([item]).names) == ["late"]
    with pytest.raises(InvalidRequest) as caught:
        normalize_input([{"type": "additional_tools", "role": "developer", "tools": [{"type": "web_search"}]}])
    assert caught.value.param == "input[0].tools[0].type"
    with pytest.raises(InvalidRequest) as caught:
        normalize_input([{"type": "additional_tools", "role": "user", "tools": []}])
    assert caught.value.param == "input[0].role"
    with pytest.raises(InvalidRequest) as caught:
        normalize_input(
            [{"type": "additional_tools", "role": "developer", "tools": [{"type": "function", "name": "bad name"}]}]
        )
    assert caught.value.param == "input[0].tools[0].name"


def test_searches_are_shown_to_the_model_as_function_calls() -> None:
    items: list[dict[str, Any]] = [
        {"type": "message", "id": "m", "role": "user", "content": []},
        {"type": "additional_tools", "id": "a", "role": "developer", "tools": []},
        {"type": "tool_search_call", "id": "t", "call_id": "c1", "execution": "server", "arguments": {"query": "x"}},
        {"type": "tool_search_output", "id": "o", "call_id": "c1", "execution": "server", "tools": []},
        # Another server's search (no call id) and an unanswered one are left out.
        {"type": "tool_search_call", "id": "u", "call_id": "c2", "execution": "server", "arguments": {}},
        {"type": "tool_search_output", "id": "v", "call_id": None, "execution": "server", "tools": []},
    ]
    shown = as_function_items(items)
    assert [i["type"] for i in shown] == ["message", "function_call", "function_call_output"]
    assert json.loads(shown[1]["arguments"]) == {"query": "x"} and shown[1]["name"] == "tool_search"
    assert "No tool matched" in shown[2]["output"]
    assert call_arguments('{"query": "a"}') == {"query": "a"} and call_arguments("plain") == {"query": "plain"}


def test_only_a_clients_items_bring_definitions() -> None:
    """A server search's results name tools the run has; a client's search and additional_tools
    bring definitions, which become the client's tools where the run has none of that name."""
    entry = {"type": "function", "name": "refund", "parameters": {"type": "object", "properties": {}}}
    server = {"type": "tool_search_output", "id": "o", "call_id": "c", "execution": "server", "tools": [entry]}
    client = dict(server, execution="client")
    assert list(found_in([server]).names) == ["refund"] and found_in([server]).added == []
    loaded = found_in([client])
    [tool] = added_tools(loaded, known=set())
    assert (tool.name, tool.source, tool.deferred) == ("refund", "client", False)
    assert added_tools(found_in([client]), known={"refund"}) == []


def test_the_search_says_what_it_can_find() -> None:
    assert search_description(0, {}) == SEARCH_DESCRIPTION
    text = search_description(3, {"crm": "namespace: The CRM", "shop": "MCP server"})
    assert text.endswith("3 tools are not loaded yet, among them those of crm (namespace: The CRM), shop (MCP server).")
    many = search_description(40, {f"s{i}": "MCP server" for i in range(35)})
    assert many.endswith("s29 (MCP server) and 5 more.")


def test_the_result_names_each_tool_as_the_model_calls_it() -> None:
    found = [
        {"type": "namespace", "name": "crm", "description": "", "tools": [{"type": "function", "name": "find"}]},
        {"type": "mcp", "server_label": "linear", "allowed_tools": ["create_issue"]},
    ]
    items: list[dict[str, Any]] = [
        {"type": "tool_search_call", "id": "t", "call_id": "c", "execution": "server", "arguments": {}},
        {"type": "tool_search_output", "id": "o", "call_id": "c", "execution": "server", "tools": found},
    ]
    text = as_function_items(items, {("linear", "create_issue"): "linear__create_issue"})[1]["output"]
    assert "- crm__find:" in text and "- linear__create_issue: create_issue of the MCP server linear" in text
