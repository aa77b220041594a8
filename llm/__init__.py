"""The LLM layer every stage calls: an OpenAI-compatible client (cached, retried, accounted), the
embedded local model, and an OpenAI-protocol server for it. It sits just above ``data`` in the
pipeline order (it may import ``data``; nothing below it imports it)."""

from llm.client import ChatResult, InfraError, LLMClient, LLMConfig, chat

__all__ = ["ChatResult", "InfraError", "LLMClient", "LLMConfig", "chat"]
