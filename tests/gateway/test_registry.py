import pytest

from rollout.errors import UnknownToolGroupError
from rollout.gateway.registry import ToolRegistry
from rollout.gateway.tools import SERVED_RESOURCE_TYPES, builtin_registry


def test_builtin_groups_register_their_tools():
    registry = builtin_registry()
    assert [f.__name__ for f in registry.group("rag_query").tools] == ["query_knowledge_base_dense"]
    assert [f.__name__ for f in registry.group("rag_query_sparse").tools] == ["query_knowledge_base_sparse"]
    assert registry.group("rag_query").requires == ("dense",)
    assert registry.group("system_info").resource_type == "system"
    assert registry.group_names[:3] == ["rag_query", "rag_query_sparse", "rag_query_hybrid"]


def test_the_module_types_a_run_checks_are_those_the_shipped_groups_serve():
    registry = builtin_registry()
    assert sorted(SERVED_RESOURCE_TYPES) == sorted({registry.group(g).resource_type for g in registry.group_names})


def test_each_registry_is_its_own():
    """Groups added to one registry are not seen by another (no class-level state)."""
    mine = builtin_registry()
    mine.add("extra", lambda: None)
    assert "extra" in mine.group_names
    assert "extra" not in builtin_registry().group_names
    assert ToolRegistry().group_names == []


def test_unknown_group_names_it_and_lists_known_groups():
    with pytest.raises(UnknownToolGroupError) as e:
        builtin_registry().group("rag_qurey")
    msg = str(e.value)
    assert "'rag_qurey'" in msg and "rag_query" in msg and "rag_query_sparse" in msg


def test_a_group_keeps_one_resource_type():
    registry = ToolRegistry()
    registry.add("g", lambda: None)
    with pytest.raises(ValueError, match="registered as 'rag'"):
        registry.add("g", lambda: None, resource_type="system")


def test_decorator_without_call_is_caught():
    registry = ToolRegistry()
    with pytest.raises(TypeError, match="forget to call"):

        @registry.tool  # type: ignore[arg-type]
        def oops() -> None: ...
