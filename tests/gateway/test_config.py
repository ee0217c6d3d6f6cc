import json

import pytest

from rollout.errors import ConfigError
from rollout.gateway.plan import plan_gateway
from rollout.gateway_file import GATEWAYS_DIR, load_gateway_file


@pytest.mark.parametrize(
    ("name", "tools"),
    [
        ("rag_hybrid.json", ["query_knowledge_base_dense", "query_knowledge_base_sparse"]),
        ("rag_dense_only.json", ["query_knowledge_base_dense"]),
        ("rag_sparse_only.json", ["query_knowledge_base_sparse"]),
        ("rag_no_tool.json", []),
        ("rag_hybrid_fused.json", ["query_knowledge_base_hybrid"]),
        *[(f"rag_pipeline{kind}.json", ["retrieve_documents", "filter_documents", "chunk_documents", "generate_answer"])
          for kind in ("", "_dense", "_sparse")],
    ],
)
def test_shipped_gateway_files_resolve_to_their_tools(name, tools):
    plan = plan_gateway(load_gateway_file(GATEWAYS_DIR / name))
    assert [t.fn.__name__ for t in plan.tools] == tools


@pytest.mark.parametrize(("kind", "indexes"), [("", {"dense", "hybrid"}), ("_dense", {"dense"}),
                                               ("_sparse", {"dense", "sparse"})])
def test_pipeline_files_load_the_dense_index_for_the_offline_filter(kind, indexes):
    # filter_documents scores with the dense encoder offline, so even the sparse pipeline loads it.
    assert set(plan_gateway(load_gateway_file(GATEWAYS_DIR / f"rag_pipeline{kind}.json")).requires) == indexes


def test_mixed_file_serves_system_and_rag_and_skips_other_types():
    plan = plan_gateway(load_gateway_file(GATEWAYS_DIR / "rag_mixed.json"))
    assert [t.fn.__name__ for t in plan.tools] == [
        "get_corpus_info",
        "query_knowledge_base_dense",
        "query_knowledge_base_sparse",
    ]
    assert plan.skipped_resource_types == ["vm_pyautogui"]
    assert set(plan.requires) == {"dense", "sparse"}


def test_missing_file_lists_available_files(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_gateway_file(tmp_path / "nope.json")
    msg = str(e.value)
    assert "nope.json" in msg and "rag_hybrid.json" in msg and "gateway_config_path=" in msg


def test_a_missing_file_lists_the_shipped_files_and_those_of_the_folder_named_only(tmp_path):
    (tmp_path / "mine.json").write_text("{}")
    with pytest.raises(ConfigError) as e:
        load_gateway_file(tmp_path / "nope.json")  # a folder that exists: its files are offered too
    assert "mine.json" in str(e.value) and "rag_hybrid.json" in str(e.value)
    with pytest.raises(ConfigError) as e:
        load_gateway_file(tmp_path / "no_such_folder" / "nope.json")
    assert "mine.json" not in str(e.value) and "rag_hybrid.json" in str(e.value)
    with pytest.raises(ConfigError) as e:
        load_gateway_file("/nonexistent.json")  # the root is no folder of gateway files
    listed = str(e.value).split("one of: ")[1].split(", ")
    assert listed == sorted(f"conf/gateways/{p.name}" for p in GATEWAYS_DIR.glob("*.json"))


def test_bad_json_names_line(tmp_path):
    p = tmp_path / "g.json"
    p.write_text('{"modules": [\n  {"resource_type": "rag",]\n}')
    with pytest.raises(ConfigError, match="line 2"):
        load_gateway_file(p)


def test_malformed_module_names_the_field(tmp_path):
    p = tmp_path / "g.json"
    p.write_text(json.dumps({"modules": [{"tool_groups": ["rag_query"]}]}))
    with pytest.raises(ConfigError, match="resource_type"):
        load_gateway_file(p)
