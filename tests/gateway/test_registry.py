import pytest

from rollout.errors import UnknownToolGroupError
from rollout.gateway.registry import ToolRegistry


def setup_module() -> None:
    ToolRegistry.autodiscover()


def test_rag_groups_register_their_tools():
    assert [f.__name__ for f in ToolRegistry.get_tools_by_group("rag_query")] == ["query_knowledge_base_dense"]
    assert [f.__name__ for f in ToolRegistry.get_tools_by_group("rag_query_sparse")] == ["query_knowledge_base_sparse"]
    assert ToolRegistry.get_group("rag_query").requires == ("dense",)
    assert ToolRegistry.get_group("system_info").resource_type == "system"


def test_get_tools_by_config_deduplicates_in_order():
    module = {"resource_type": "rag", "tool_groups": ["rag_query_sparse", "rag_query", "rag_query_sparse"]}
    names = [f.__name__ for f in ToolRegistry.get_tools_by_config(module)]
    assert names == ["query_knowledge_base_sparse", "query_knowledge_base_dense"]


def test_unknown_group_names_it_and_lists_known_groups():
    with pytest.raises(UnknownToolGroupError) as e:
        ToolRegistry.get_tools_by_config({"tool_groups": ["rag_qurey"]})
    msg = str(e.value)
    assert "'rag_qurey'" in msg and "rag_query" in msg and "rag_query_sparse" in msg


def test_decorator_without_call_is_caught():
    with pytest.raises(TypeError, match="forget to call"):

        @ToolRegistry.register_tool  # type: ignore[arg-type]
        def oops() -> None: ...
