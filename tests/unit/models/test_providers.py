"""Each provider builds from its spec (with a dummy key), and a missing key or package is one line naming the fix.

No request is sent: building a LangChain chat model does not touch the network.
"""

from __future__ import annotations

import sys

import pytest

from models.registry import ModelSpecError, Sampling, create_role_model, registered_provider
from models.resilience import ResilientChatModel

KEYS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "GOOGLE_API_KEY", "GEMINI_API_KEY", "HF_TOKEN", "HUGGINGFACEHUB_API_TOKEN")


@pytest.fixture(autouse=True)
def no_keys(monkeypatch):
    for name in KEYS:
        monkeypatch.delenv(name, raising=False)


def _one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_gemini_builds_from_its_spec(monkeypatch):
    from langchain_google_genai import ChatGoogleGenerativeAI

    monkeypatch.setenv("GOOGLE_API_KEY", "dummy-google-key")
    model = create_role_model(
        "google_genai:gemini-2.0-flash",
        role="target",
        sampling=Sampling(temperature=0.2, max_tokens=64, seed=3, extra={"top_p": 0.9}),
    )
    assert isinstance(model.chat, ResilientChatModel)
    inner = model.chat.inner
    assert isinstance(inner, ChatGoogleGenerativeAI)
    assert inner.model.endswith("gemini-2.0-flash")
    assert inner.temperature == 0.2 and inner.max_output_tokens == 64 and inner.top_p == 0.9
    assert model.spec == "google_genai:gemini-2.0-flash" and model.style == "chat"
    assert "dummy-google-key" not in repr(model.chat.cache_params)


def test_gemini_without_a_key_names_the_variable():
    with pytest.raises(ModelSpecError) as exc:
        create_role_model("google_genai:gemini-2.0-flash", role="judge", sampling=Sampling())
    assert "set GOOGLE_API_KEY or GEMINI_API_KEY" in _one_line(exc)


def test_hugging_face_endpoint_url_builds_with_a_token(monkeypatch):
    from langchain_huggingface import ChatHuggingFace, HuggingFaceEndpoint

    monkeypatch.setenv("HF_TOKEN", "hf_dummy")
    url = "https://user:pw@abc.us-east-1.aws.endpoints.huggingface.cloud"
    model = create_role_model(f"hf:{url}", role="target", sampling=Sampling(temperature=0.0, max_tokens=32))
    inner = model.chat.inner
    assert isinstance(inner, ChatHuggingFace) and isinstance(inner.llm, HuggingFaceEndpoint)
    assert inner.llm.max_new_tokens == 32 and inner.llm.temperature > 0  # TGI refuses exactly 0
    assert model.model_id == "hf-endpoint:https://abc.us-east-1.aws.endpoints.huggingface.cloud"  # no credentials


def test_hugging_face_inference_provider_builds_from_a_repo(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_dummy")
    model = create_role_model(
        "hf:Qwen/Qwen2.5-7B-Instruct", role="target", sampling=Sampling(seed=1, extra={"provider": "auto"})
    )
    inner = model.chat.inner
    assert inner.model_id == "Qwen/Qwen2.5-7B-Instruct"
    assert inner.llm.repo_id == "Qwen/Qwen2.5-7B-Instruct" and inner.llm.provider == "auto" and inner.llm.seed == 1
    assert model.model_id == "hf:Qwen/Qwen2.5-7B-Instruct via auto"


def test_hugging_face_server_at_a_base_url_needs_no_token():
    model = create_role_model(
        "hf:Qwen/Qwen2.5-7B-Instruct", role="target", sampling=Sampling(base_url="http://127.0.0.1:8080")
    )
    assert model.chat.inner.llm.endpoint_url == "http://127.0.0.1:8080"
    assert model.model_id == "hf:Qwen/Qwen2.5-7B-Instruct @ http://127.0.0.1:8080"


@pytest.mark.parametrize(
    "spec, extra",
    [("hf:https://abc.endpoints.huggingface.cloud", {}), ("hf:Qwen/Qwen2.5-7B-Instruct", {"provider": "auto"})],
)
def test_hosted_hugging_face_without_a_token_names_the_variable(spec, extra):
    with pytest.raises(ModelSpecError) as exc:
        create_role_model(spec, role="target", sampling=Sampling(extra=extra))
    assert "set HF_TOKEN or HUGGINGFACEHUB_API_TOKEN" in _one_line(exc)


def test_local_transformers_pipeline_without_the_package_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # as if not installed
    with pytest.raises(ModelSpecError) as exc:
        create_role_model("hf:Qwen/Qwen2.5-7B-Instruct", role="target", sampling=Sampling())
    assert "pip install transformers torch" in _one_line(exc)


@pytest.mark.parametrize(
    "spec, module, package",
    [
        ("google_genai:gemini-2.0-flash", "langchain_google_genai", "langchain-google-genai"),
        ("hf:Qwen/Qwen2.5-7B-Instruct", "langchain_huggingface", "langchain-huggingface"),
        ("openai:gpt-4o-mini", "langchain_openai", "langchain-openai"),
    ],
)
def test_a_missing_provider_package_names_the_install(monkeypatch, spec, module, package):
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ModelSpecError) as exc:
        create_role_model(spec, role="target", sampling=Sampling())
    assert f"pip install {package}" in _one_line(exc)


def test_openai_compatible_server_per_role_base_url_needs_no_key():
    model = create_role_model(
        "openai:qwen2.5",
        role="user",
        sampling=Sampling(base_url="http://127.0.0.1:8000/v1", temperature=0.5, max_tokens=99),
    )
    inner = model.chat.inner
    assert str(inner.openai_api_base).startswith("http://127.0.0.1:8000/v1")
    assert inner.max_retries == 0  # retries are ours, one policy for every provider
    assert model.model_id == "openai:qwen2.5 @ http://127.0.0.1:8000/v1"


def test_openai_without_a_key_or_base_url_names_both_fixes():
    with pytest.raises(ModelSpecError) as exc:
        create_role_model("openai:gpt-4o-mini", role="judge", sampling=Sampling())
    assert "set OPENAI_API_KEY (or --base-url" in _one_line(exc)


def test_a_wrong_extra_argument_is_a_one_line_spec_error(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-dummy")
    with pytest.raises(ModelSpecError) as exc:
        create_role_model("openai:gpt-4o-mini", role="target", sampling=Sampling(extra={"temperature": "hot"}))
    assert "check its extra arguments" in _one_line(exc)


def test_a_registered_provider_lives_only_inside_its_block():
    from tests.conftest import ScriptedChatModel

    def factory(reply):
        return lambda name, role, sampling: (
            ScriptedChatModel(respond=lambda m, n: reply, calls=[]),
            f"tmp:{name}",
            "chat",
        )

    def ask() -> str:
        return str(create_role_model("tmp:x", role="target", sampling=Sampling()).chat.invoke("hi").content)

    with registered_provider("tmp", factory("outer")):
        assert ask() == "outer"
        with registered_provider("tmp", factory("inner")):
            assert ask() == "inner"
        assert ask() == "outer"  # the earlier registration is back, not dropped
    with pytest.raises(ModelSpecError, match="unknown model provider 'tmp'"):
        create_role_model("tmp:x", role="target", sampling=Sampling())
    with registered_provider("openai", factory("fake openai")):
        assert (
            create_role_model("openai:x", role="target", sampling=Sampling()).chat.invoke("hi").content == "fake openai"
        )
    real = create_role_model("openai:gpt-4o-mini", role="target", sampling=Sampling(base_url="http://127.0.0.1:9"))
    assert real.model_id == "openai:gpt-4o-mini @ http://127.0.0.1:9"  # the built-in provider is back
