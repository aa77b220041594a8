"""An OpenAI-protocol server whose answers a test scripts: ``answer(request) -> [text, ...]``
gives the choices (as many as the request's ``n`` asks, or fewer)."""

from llm.serve import serve_in_thread


def scripted_server(answer):
    def complete(payload):
        texts = answer(payload)
        return {"id": "x", "object": "chat.completion", "created": 0, "model": "scripted",
                "choices": [{"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}
                            for i, t in enumerate(texts)],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
    return serve_in_thread(complete, "scripted")
