"""The LLM engine every role shares: OpenAI-compatible transport, response cache, retries,
concurrency, pricing, structured answers and the embedded local model. No pytest import;
imports nothing outside `llm/` except `errors`.
"""

CACHE_MODES: tuple[str, ...] = ("on", "off", "refresh", "replay")
"""`--evalbench-cache` modes (`cache.py` has what each does). Here, where the package's `__init__` imports
nothing, so the option can be declared in every pytest run without importing the cache and its files."""
