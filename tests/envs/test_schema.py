import pytest

from envs.schema import SchemaError, input_schema_to_parameters


def test_titles_dropped_and_defs_inlined():
    schema = {
        "type": "object",
        "title": "Args",
        "properties": {"filter": {"$ref": "#/$defs/Filter"}, "q": {"type": "string", "title": "Q"}},
        "required": ["q"],
        "$defs": {"Filter": {"type": "object", "title": "Filter", "properties": {"year": {"type": "integer"}}}},
    }
    params = input_schema_to_parameters(schema)
    assert "title" not in params and "$defs" not in params
    assert params["properties"]["filter"] == {"type": "object", "properties": {"year": {"type": "integer"}}}
    assert params["properties"]["q"] == {"type": "string"}
    assert params["required"] == ["q"]


def test_self_reference_is_cut_to_type_and_description():
    schema = {
        "type": "object",
        "properties": {"root": {"$ref": "#/$defs/Node"}},
        "$defs": {
            "Node": {
                "type": "object",
                "description": "a tree node",
                "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
            }
        },
    }
    root = input_schema_to_parameters(schema)["properties"]["root"]
    assert root["properties"]["children"]["items"] == {"type": "object", "description": "a tree node"}


def test_unknown_reference_is_a_clear_error():
    with pytest.raises(SchemaError, match="#/\\$defs/Missing"):
        input_schema_to_parameters({"type": "object", "properties": {"x": {"$ref": "#/$defs/Missing"}}})


def test_empty_schema_becomes_empty_object():
    assert input_schema_to_parameters({}) == {"type": "object", "properties": {}}
