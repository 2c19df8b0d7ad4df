"""The LLM engine every role shares: OpenAI-compatible transport, response cache, retries,
concurrency, pricing, structured answers and the embedded local model. No pytest import;
imports nothing outside `llm/` except `errors`.
"""
