"""The LLM layer every stage calls: an OpenAI-compatible client (cached, retried, accounted), the
embedded local model, and an OpenAI-protocol server for it. It sits just above ``data`` in the
pipeline order (it may import ``data``; nothing below it imports it).

``from llm import LLMClient`` loads ``llm.client`` on first use (PEP 562), not when the package
is imported: ``python -m llm.client`` then runs the module once, without runpy's warning that it
was already imported by its package."""

__all__ = ["ChatResult", "InfraError", "LLMClient", "LLMConfig", "chat"]


def __getattr__(name: str):
    if name in __all__:
        from llm import client

        return getattr(client, name)
    raise AttributeError(f"module 'llm' has no attribute {name!r}")
