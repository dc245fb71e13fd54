"""Providers are described once, and a package adds one through the ``dymt_esb.providers`` entry point group.

The plugin tests install a real distribution (a dist-info with entry_points.txt on the path of a new process), so
importlib.metadata finds it as it finds any installed package.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from models.providers import ENTRY_POINT_GROUP, Provider, get_provider, provider_names, registered_provider
from models.registry import ModelSpecError, Sampling, computes_here, create_role_model, parse_spec, provider_endpoint

REPO = Path(__file__).resolve().parents[3]
PLUGIN = """
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from models.providers import Provider


def _factory(name, role, sampling):
    reply = "Rationale: it treats people fairly.\\nLabel: Not biased"
    return FakeListChatModel(responses=[reply]), f"acme:{name}", "chat"


provider = Provider(name="acme", factory=_factory, key_variables=("ACME_KEY",), served=True, example="acme:small")


def several():
    return [Provider(name="acme_local", factory=_factory), Provider(name="local", factory=_factory)]
"""


@pytest.fixture
def plugin_path(tmp_path: Path) -> Path:
    """A directory holding an installed distribution whose entry points add providers (and one broken one)."""
    (tmp_path / "acme_dymt").mkdir()
    (tmp_path / "acme_dymt" / "__init__.py").write_text(PLUGIN)
    info = tmp_path / "acme_dymt-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-dymt\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\n"
        "acme = acme_dymt:provider\n"
        "acme_more = acme_dymt:several\n"
        "ghost = no_such_module_here:provider\n"
    )
    return tmp_path


def _run(plugin_path: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join([str(plugin_path), str(REPO)])
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_an_entry_point_provider_is_known_with_its_settings_and_the_built_ins_are_unchanged(plugin_path, tmp_path):
    probe = textwrap.dedent(
        """
        import json
        from models.providers import get_provider, provider_load_failures, provider_names
        from models.registry import Sampling, computes_here, provider_endpoint, parse_spec
        acme = get_provider("acme")
        print(json.dumps({
            "names": provider_names(),
            "key": acme.key_hint(),
            "here": computes_here("acme:small", Sampling()),
            "endpoint": provider_endpoint(parse_spec("acme:small"), Sampling()),
            "local_factory": get_provider("local").factory.__module__,
            "failures": provider_load_failures(),
        }))
        """
    )
    done = _run(plugin_path, "-c", probe, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["names"] == ["acme", "acme_local", "google_genai", "hf", "local", "openai"]
    assert found["key"] == "ACME_KEY"
    assert found["here"] is False  # served: a run with it may play in several processes
    assert found["endpoint"] == "acme"
    assert found["local_factory"] == "models.builtin_providers"  # a plugin cannot take a built-in's name
    assert set(found["failures"]) == {"acme_more", "ghost"}
    assert "no_such_module_here" in found["failures"]["ghost"]
    assert "'local' is a built-in provider's name" in found["failures"]["acme_more"]


def test_a_run_plays_and_judges_with_an_entry_point_provider(plugin_path, tmp_path):
    db = tmp_path / "runs.db"
    done = _run(
        plugin_path,
        "-m",
        "graph.run",
        *("--mode", "implicit", "--turns", "2", "--limit", "1", "--run-id", "acme1", "--db", str(db)),
        *("--user-model", "acme:u", "--target-model", "acme:t", "--judge-model", "acme:j"),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "models: judge=acme:j, target=acme:t, user=acme:u" in done.stdout
    assert "unparsed labels 0" in done.stdout and "finished 1/1" in done.stdout


def test_a_provider_whose_entry_point_fails_is_named_in_one_line_exit_2(plugin_path, tmp_path):
    done = _run(
        plugin_path, "-m", "graph.run", "--target-model", "ghost:x", "--db", str(tmp_path / "r.db"), cwd=tmp_path
    )
    assert done.returncode == 2
    line = done.stderr.strip()
    assert "\n" not in line
    assert "unknown model provider 'ghost'" in line
    assert "its entry point 'ghost' failed to load" in line and "no_such_module_here" in line


def test_provider_imports_run_one_way_and_the_built_ins_are_there_from_the_descriptor_module():
    """models/providers.py (descriptor and registry) imports no built-in: models/builtin_providers.py imports it and
    registers them; a new process that imports only models.providers finds them, without LangChain loaded."""
    import ast

    tree = ast.parse((REPO / "models" / "providers.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    assert not {m for m in imported if m and m.startswith("models.") and m != "models.thinking"}
    assert "importlib" not in imported  # importlib.metadata only: the entry points
    code = (
        "import sys, json; from models.providers import get_provider, provider_names; "
        "print(json.dumps([provider_names(), get_provider('openai').factory.__module__, "
        "'langchain_core' in sys.modules]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert json.loads(done.stdout) == [["google_genai", "hf", "local", "openai"], "models.builtin_providers", False]


def test_the_built_in_providers_are_described_once():
    described = {name: get_provider(name) for name in provider_names()}
    assert {"local", "openai", "google_genai", "hf"} <= set(described)
    assert {n: p.seeded for n, p in described.items() if n in ("local", "openai", "google_genai", "hf")} == {
        "local": True,
        "openai": True,
        "google_genai": True,
        "hf": False,
    }
    assert described["openai"].key_hint() == "OPENAI_API_KEY"
    assert described["google_genai"].key_hint() == "GOOGLE_API_KEY (or GEMINI_API_KEY)"
    assert described["local"].in_process and not described["openai"].in_process


def test_what_the_registry_switches_on_comes_from_the_descriptor(monkeypatch):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "GOOGLE_API_KEY", "HF_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-dummy")
    assert create_role_model("openai:gpt-4o-mini", role="judge", sampling=Sampling()).structured == "openai"
    served = Sampling(base_url="http://127.0.0.1:9/v1")
    assert create_role_model("openai:m", role="judge", sampling=served).structured == "openai_compatible"
    assert computes_here("local:gemma3-270m", Sampling()) and not computes_here("openai:m", Sampling())
    assert computes_here("hf:some/repo", Sampling()) and not computes_here("hf:some/repo", served)
    assert provider_endpoint(parse_spec("local:gemma3-270m"), Sampling()) is None
    assert provider_endpoint(parse_spec("openai:m"), served) == "openai @ http://127.0.0.1:9/v1"


def test_a_descriptor_registered_for_a_block_brings_its_settings_and_leaves_no_trace():
    from tests.conftest import ScriptedChatModel

    def factory(name, role, sampling):
        return ScriptedChatModel(respond=lambda m, n: "ok", calls=[]), f"mine:{name}", "chat"

    mine = Provider(name="mine", factory=factory, seeded=True, structured="openai", served=True)
    with registered_provider("mine", mine):
        model = create_role_model("mine:x", role="judge", sampling=Sampling())
        assert model.structured == "openai" and not computes_here("mine:x", Sampling())
        assert model.model_id == "mine:x"
    with pytest.raises(ModelSpecError, match="unknown model provider 'mine'"):
        get_provider("mine")
