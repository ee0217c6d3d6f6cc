from __future__ import annotations

import asyncio
import copy
import json
import logging

import pytest
from mcp.server.mcpserver import MCPServer
from mcp_types import Tool
from pydantic import BaseModel, Field

from rollout.errors import SchemaError
from rollout.mcp_client.schema import (
    RefResolver,
    input_schema_to_parameters,
    mcp_tool_to_function,
    openapi_schema_to_parameters,
    pointer_lookup,
)


def _assert_self_contained(params: dict) -> None:
    text = json.dumps(params)
    assert "$ref" not in text and '"title"' not in text and "$defs" not in text and '"definitions"' not in text


def test_titles_dropped_defs_inlined_required_and_additional_properties_kept():
    schema = {
        "type": "object",
        "title": "Args",
        "properties": {"filter": {"$ref": "#/$defs/Filter"}, "q": {"type": "string", "title": "Q"}},
        "required": ["q"],
        "additionalProperties": False,
        "$defs": {
            "Filter": {
                "type": "object",
                "title": "Filter",
                "properties": {"year": {"type": "integer"}},
                "additionalProperties": {"type": "string", "title": "Extra"},
            }
        },
    }
    assert input_schema_to_parameters(schema) == {
        "type": "object",
        "properties": {
            "filter": {
                "type": "object",
                "properties": {"year": {"type": "integer"}},
                "additionalProperties": {"type": "string"},
            },
            "q": {"type": "string"},
        },
        "required": ["q"],
        "additionalProperties": False,
    }


def test_seed_example_node_child_is_pruned_to_a_bare_object():
    # The seed document's example, input and expected output verbatim.
    schema = {
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {"value": {"type": "string"}, "child": {"$ref": "#/$defs/Node"}},
            }
        },
        "properties": {"root": {"$ref": "#/$defs/Node"}},
    }
    assert input_schema_to_parameters(schema) == {
        "type": "object",
        "properties": {
            "root": {
                "type": "object",
                "properties": {"value": {"type": "string"}, "child": {"type": "object"}},
            }
        },
    }


def test_self_referencing_children_list_is_cut_to_type_and_description():
    schema = {
        "type": "object",
        "properties": {"root": {"$ref": "#/$defs/Node"}},
        "$defs": {
            "Node": {
                "type": "object",
                "description": "a tree node",
                "properties": {
                    "name": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                },
                "required": ["name"],
            }
        },
    }
    root = input_schema_to_parameters(schema)["properties"]["root"]
    assert root["description"] == "a tree node" and root["required"] == ["name"]
    children = root["properties"]["children"]
    assert children == {"type": "array", "items": {"type": "object", "description": "a tree node"}}


def test_mutual_recursion_is_pruned_where_the_cycle_closes():
    schema = {
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/A"}},
        "$defs": {
            "A": {"type": "object", "description": "an A", "properties": {"b": {"$ref": "#/$defs/B"}}},
            "B": {"type": "object", "description": "a B", "properties": {"a": {"$ref": "#/$defs/A"}}},
        },
    }
    a = input_schema_to_parameters(schema)["properties"]["a"]
    assert a["properties"]["b"]["description"] == "a B"
    assert a["properties"]["b"]["properties"]["a"] == {"type": "object", "description": "an A"}


def test_same_definition_used_twice_side_by_side_is_not_a_cycle():
    address = {"type": "object", "properties": {"city": {"type": "string"}}}
    schema = {
        "type": "object",
        "properties": {"billing": {"$ref": "#/$defs/Address"}, "shipping": {"$ref": "#/$defs/Address"}},
        "$defs": {"Address": address},
    }
    props = input_schema_to_parameters(schema)["properties"]
    assert props["billing"] == props["shipping"] == address


def test_unknown_reference_names_it_and_lists_available_definitions():
    schema = {
        "type": "object",
        "properties": {"x": {"$ref": "#/$defs/Missing"}},
        "$defs": {"Filter": {"type": "object"}, "Node": {"type": "object"}},
    }
    with pytest.raises(SchemaError) as info:
        input_schema_to_parameters(schema)
    message = str(info.value)
    assert "'#/$defs/Missing'" in message
    assert "available definitions: #/$defs/Filter, #/$defs/Node" in message


def test_unknown_reference_without_definitions_says_none():
    with pytest.raises(SchemaError, match=r"'#/\$defs/Missing'.*available definitions: none"):
        input_schema_to_parameters({"type": "object", "properties": {"x": {"$ref": "#/$defs/Missing"}}})


def test_remote_reference_is_refused():
    with pytest.raises(SchemaError, match="https://example.com/s.json"):
        input_schema_to_parameters({"properties": {"x": {"$ref": "https://example.com/s.json#/$defs/X"}}})


def _chain(refs: int) -> dict:
    """A schema whose property `x` reaches the leaf `L{refs}` through exactly `refs` references."""
    defs = {
        f"L{i}": {"type": "object", "properties": {"next": {"$ref": f"#/$defs/L{i + 1}"}}} for i in range(1, refs)
    }
    defs[f"L{refs}"] = {"type": "object", "description": "leaf", "properties": {"value": {"type": "string"}}}
    return {"type": "object", "properties": {"x": {"$ref": "#/$defs/L1"}}, "$defs": defs}


def _leaf(params: dict) -> dict:
    node = params["properties"]["x"]
    while "next" in node.get("properties", {}):
        node = node["properties"]["next"]
    return node


def test_chain_exactly_at_the_depth_limit_is_inlined():
    params = input_schema_to_parameters(_chain(3))
    assert _leaf(params) == {"type": "object", "description": "leaf", "properties": {"value": {"type": "string"}}}
    _assert_self_contained(params)


def test_chain_one_past_the_depth_limit_is_pruned():
    params = input_schema_to_parameters(_chain(4))
    x = params["properties"]["x"]
    third = x["properties"]["next"]["properties"]["next"]["properties"]["next"]
    assert third == {"type": "object", "description": "leaf"}
    _assert_self_contained(params)


@pytest.mark.parametrize(("max_depth", "refs", "inlined"), [(1, 1, True), (1, 2, False), (5, 5, True), (5, 6, False)])
def test_depth_limit_is_a_parameter(max_depth, refs, inlined):
    leaf = _leaf(input_schema_to_parameters(_chain(refs), max_depth=max_depth))
    assert ("properties" in leaf) is inlined and leaf["description"] == "leaf"


def test_depth_zero_prunes_every_reference_and_negative_is_refused():
    params = input_schema_to_parameters(_chain(1), max_depth=0)
    assert params["properties"]["x"] == {"type": "object", "description": "leaf"}
    with pytest.raises(ValueError, match="max_depth"):
        RefResolver(pointer_lookup({}), max_depth=-1)


def test_openapi_components_schemas_are_resolved_against_the_document():
    document = {
        "openapi": "3.1.0",
        "components": {
            "schemas": {
                "Pet": {
                    "type": "object",
                    "title": "Pet",
                    "description": "a pet",
                    "properties": {"name": {"type": "string"}, "owner": {"$ref": "#/components/schemas/Owner"}},
                    "required": ["name"],
                },
                "Owner": {
                    "type": "object",
                    "properties": {"pets": {"type": "array", "items": {"$ref": "#/components/schemas/Pet"}}},
                },
            }
        },
    }
    body = {"type": "object", "properties": {"pet": {"$ref": "#/components/schemas/Pet"}}, "required": ["pet"]}
    params = openapi_schema_to_parameters(body, document)
    pet = params["properties"]["pet"]
    assert pet["required"] == ["name"] and "title" not in pet
    assert pet["properties"]["owner"]["properties"]["pets"]["items"] == {"type": "object", "description": "a pet"}
    assert params["required"] == ["pet"]
    listed = r"'#/components/schemas/Cat'.*#/components/schemas/Owner, #/components/schemas/Pet"
    with pytest.raises(SchemaError, match=listed):
        openapi_schema_to_parameters({"properties": {"c": {"$ref": "#/components/schemas/Cat"}}}, document)


def test_resolver_takes_any_lookup():
    table = {"urn:color": {"type": "string", "enum": ["red", "green"], "title": "Color"}}
    resolved = RefResolver(table.__getitem__).resolve({"type": "object", "properties": {"c": {"$ref": "urn:color"}}})
    assert resolved["properties"]["c"] == {"type": "string", "enum": ["red", "green"]}


def test_ref_siblings_override_the_target():
    schema = {
        "type": "object",
        "properties": {
            "home": {"$ref": "#/$defs/Address", "description": "where they live", "default": None},
            "node": {"$ref": "#/$defs/Node", "description": "the start node"},
        },
        "$defs": {
            "Address": {"type": "object", "description": "an address", "properties": {"city": {"type": "string"}}},
            "Node": {
                "type": "object",
                "description": "a node",
                "properties": {"next": {"$ref": "#/$defs/Node", "description": "the next one"}},
            },
        },
    }
    props = input_schema_to_parameters(schema)["properties"]
    assert props["home"] == {
        "type": "object",
        "description": "where they live",
        "properties": {"city": {"type": "string"}},
        "default": None,
    }
    assert props["node"]["description"] == "the start node"
    assert props["node"]["properties"]["next"] == {"type": "object", "description": "the next one"}


def test_any_of_and_all_of_are_walked_and_nullable_any_of_is_left_as_is():
    schema = {
        "type": "object",
        "properties": {
            "maybe": {"anyOf": [{"$ref": "#/$defs/A"}, {"type": "null"}], "default": None, "title": "Maybe"},
            "both": {"allOf": [{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/B"}]},
            "wrapped": {"allOf": [{"$ref": "#/$defs/A"}], "description": "an A, described here"},
            "either": {"oneOf": [{"$ref": "#/$defs/B"}, {"type": "string", "title": "S"}]},
        },
        "$defs": {
            "A": {"type": "object", "title": "A", "properties": {"a": {"type": "integer"}}},
            "B": {"type": "object", "properties": {"b": {"type": "boolean"}}},
        },
    }
    a = {"type": "object", "properties": {"a": {"type": "integer"}}}
    b = {"type": "object", "properties": {"b": {"type": "boolean"}}}
    props = input_schema_to_parameters(schema)["properties"]
    assert props["maybe"] == {"anyOf": [a, {"type": "null"}], "default": None}
    assert props["both"] == {"allOf": [a, b]}
    assert props["wrapped"] == {**a, "description": "an A, described here"}
    assert props["either"] == {"oneOf": [b, {"type": "string"}]}


def test_data_and_property_names_are_not_mistaken_for_schema_keywords():
    schema = {
        "type": "object",
        "properties": {
            "title": {"type": "string", "title": "Title"},
            "definitions": {"type": "array", "items": {"type": "string"}},
            "mode": {"enum": ["title", "$defs"], "default": {"title": "kept"}, "examples": [{"title": "kept"}]},
        },
        "required": ["title"],
    }
    params = input_schema_to_parameters(schema)
    assert params["properties"] == {
        "title": {"type": "string"},
        "definitions": {"type": "array", "items": {"type": "string"}},
        "mode": {"enum": ["title", "$defs"], "default": {"title": "kept"}, "examples": [{"title": "kept"}]},
    }
    assert params["required"] == ["title"]


def test_draft7_definitions_and_json_pointer_references():
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {
            "a": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}},
            "b": {"$ref": "#/properties/a"},
            "c": {"$ref": "#/definitions/c~1d"},
        },
        "definitions": {"c/d": {"type": "string", "format": "date"}},
    }
    params = input_schema_to_parameters(schema)
    assert params["properties"]["b"] == params["properties"]["a"]
    assert params["properties"]["c"] == {"type": "string", "format": "date"}
    _assert_self_contained(params)
    assert "$schema" not in params


def test_input_schema_is_not_mutated():
    schema = _chain(5)
    before = copy.deepcopy(schema)
    input_schema_to_parameters(schema)
    assert schema == before


def test_empty_schema_becomes_empty_object():
    assert input_schema_to_parameters({}) == {"type": "object", "properties": {}}
    assert input_schema_to_parameters(None) == {"type": "object", "properties": {}}


class Address(BaseModel):
    street: str = Field(description="Street and number")
    city: str


class Person(BaseModel):
    name: str
    home: Address = Field(description="Where they live")
    past: list[Address] = []
    manager: Person | None = None


def test_real_pydantic_schema_with_nested_and_recursive_models():
    # pydantic puts a recursive top-level model in $defs and refers to it from the root.
    raw = Person.model_json_schema()
    assert raw["$ref"] == "#/$defs/Person"
    params = input_schema_to_parameters(raw)
    _assert_self_contained(params)
    address = {
        "type": "object",
        "properties": {"street": {"type": "string", "description": "Street and number"}, "city": {"type": "string"}},
        "required": ["street", "city"],
    }
    assert params == {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "home": {**address, "description": "Where they live"},
            "past": {"type": "array", "items": address, "default": []},
            "manager": {"anyOf": [{"type": "object"}, {"type": "null"}], "default": None},
        },
        "required": ["name", "home"],
    }


def test_mcp_tool_to_function_on_a_tool_listed_by_a_real_server():
    server = MCPServer("schema-test")

    def search(query: str, filters: Address | None = None, top_k: int = Field(3, description="How many hits")) -> str:
        """Search the knowledge base.

        Returns the best passages.
        """
        return query

    server.add_tool(search)
    (tool,) = asyncio.run(server.list_tools())
    assert isinstance(tool, Tool)
    fn = mcp_tool_to_function(tool)
    assert fn["type"] == "function"
    assert fn["function"]["name"] == "search"
    assert fn["function"]["description"].startswith("Search the knowledge base.")
    params = fn["function"]["parameters"]
    _assert_self_contained(params)
    assert params["required"] == ["query"]
    assert params["properties"]["top_k"] == {"type": "integer", "default": 3, "description": "How many hits"}
    assert params["properties"]["filters"]["anyOf"][0]["properties"]["street"] == {
        "type": "string",
        "description": "Street and number",
    }


def test_mcp_tool_to_function_strict_error_names_the_tool():
    tool = Tool(name="broken", input_schema={"type": "object", "properties": {"x": {"$ref": "#/$defs/Nope"}}})
    with pytest.raises(SchemaError, match=r"tool 'broken'.*'#/\$defs/Nope'"):
        mcp_tool_to_function(tool, strict=True)


def test_a_schema_that_cannot_be_converted_falls_back_to_a_plain_object_with_a_warning(caplog):
    tool = Tool(name="broken", description="Look a key up.",
                input_schema={"type": "object", "properties": {"x": {"$ref": "#/$defs/Nope"}}})
    with caplog.at_level(logging.WARNING, logger="rollout.mcp_client.schema"):
        spec = mcp_tool_to_function(tool)
    assert spec == {"type": "function",
                    "function": {"name": "broken", "description": "Look a key up.", "parameters": {"type": "object"}}}
    assert "'broken'" in caplog.text and "#/$defs/Nope" in caplog.text
