"""Every role's requests put what does not change first and what changes last, so repeated prefixes
hit the provider's prompt cache: two requests of one role share every message before the first one
carrying what varies, byte for byte, and inside that message the varying part comes after the stable
text. With `cache_prompt: true` the stable prefix is marked for Anthropic-style caches."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from pytest_evalbench.formats.results import Message
from pytest_evalbench.formats.spec import Generation, Metric, ModelConfig
from pytest_evalbench.kinds.explain import build_messages
from pytest_evalbench.kinds.metric_judge import Example, judge_messages
from pytest_evalbench.kinds.scenarios.models import Scenario
from pytest_evalbench.kinds.scenarios.runner import simulate
from pytest_evalbench.kinds.targets import ModelTarget
from pytest_evalbench.llm.cache import ResponseCache
from pytest_evalbench.llm.costs import PriceTable
from pytest_evalbench.llm.engine import Engine, EngineSettings
from pytest_evalbench.llm.prompt_cache import with_cache_markers
from pytest_evalbench.llm.types import Endpoint, Usage
from pytest_evalbench.testing import FakeLLMServer

METRIC = Metric(id="m01", name="Asks questions", type="positive", definition="Asks a clarifying question.",
                examples=["Where are you going?"])


def shared_messages(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> int:
    """How many leading messages two requests share byte for byte."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if json.dumps(x) != json.dumps(y)), min(len(a), len(b)))


def common_text(a: str, b: str) -> str:
    """The text two strings start with."""
    end = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return a[:end]


def transcript(*texts: str) -> list[Message]:
    return [Message(role="user" if i % 2 == 0 else "assistant", content=t) for i, t in enumerate(texts)]


def test_the_judge_shares_everything_before_the_transcript_it_judges() -> None:
    first, second = transcript("hi", "Where to?", "Rome", "Fine."), transcript("hello", "Sure.", "ok", "Bye.")
    contrast = [Example(1, transcript("a", "Why?"), True), Example(2, transcript("b", "Yes."), False)]
    for style in ("examples", "plain", "contrast"):
        a, b = judge_messages(METRIC, first, style, contrast), judge_messages(METRIC, second, style, contrast)
        assert shared_messages(a, b) == len(a) - 1, style  # system prompt and contrast examples identical
        stable = common_text(a[-1]["content"], b[-1]["content"])
        # the rubric, the definition and the examples come before the conversation, which comes last
        assert stable.endswith("CONVERSATION:\nUSER: h"), style
        assert METRIC.behaviour in stable and ("Where are you going?" in stable) == (style == "examples")


def test_an_explain_evaluator_shares_its_rubric_and_puts_the_response_last() -> None:
    a = build_messages("RelevanceExplain", {"question": "Q?", "input": "answer one"})
    b = build_messages("RelevanceExplain", {"question": "Q?", "input": "answer two"})
    assert shared_messages(a, b) == 1
    assert common_text(a[-1]["content"], b[-1]["content"]).endswith("RESPONSE:\nanswer ")


def test_a_conversation_grows_at_its_end_for_the_simulated_user_and_the_target(tmp_path: Path) -> None:
    scenario = Scenario(id="m01_s001_v01", metric_id="m01", persona="neutral", user_persona="a sailor",
                        user_goal="get help", latent_adversarial_goal="", landmarks=[], demographic={})

    def answer(request: dict[str, Any]) -> str:
        return "Thought: go on\nMessage: tell me more" if "simulating a human" in str(request["messages"][0]) \
            else "Where are you going?"

    with FakeLLMServer(answer) as server:
        engine = Engine(EngineSettings(), ResponseCache(tmp_path, "off"), PriceTable())
        endpoint = Endpoint("m", server.base_url, api_key="k")
        target = ModelTarget("t", endpoint, "You are helpful.", engine)
        try:
            engine.run(simulate(scenario, METRIC, Generation(turns=3), user=endpoint, target=target, engine=engine,
                                sample=0, usage_by_phase={"simulate": Usage()}))
        finally:
            engine.close()
        requests = [r["messages"] for r in server.requests]
    users = [m for m in requests if "simulating a human" in str(m[0])]
    targets = [m for m in requests if m[0]["content"] == "You are helpful."]
    assert len(users) == len(targets) == 3
    for earlier, later in itertools.pairwise(targets):  # the target's next request extends its last one
        assert later[:len(earlier)] == earlier
    for earlier, later in itertools.pairwise(users):  # the user's: all but its last message (this turn's instruction)
        assert shared_messages(earlier, later) == len(earlier) - 1


def test_cache_prompt_marks_the_system_message_and_the_end_of_the_shared_prefix() -> None:
    messages = [{"role": "system", "content": "rubric"}, {"role": "user", "content": "one"},
                {"role": "assistant", "content": "two"}, {"role": "user", "content": "three"}]
    marked = with_cache_markers(messages)
    ephemeral = {"type": "ephemeral"}
    assert marked[0]["content"] == [{"type": "text", "text": "rubric", "cache_control": ephemeral}]
    assert marked[2]["content"] == [{"type": "text", "text": "two", "cache_control": ephemeral}]
    assert marked[1] == messages[1] and marked[3] == messages[3]
    assert messages[0]["content"] == "rubric"  # the caller's messages are not changed
    assert with_cache_markers(messages[:1]) == messages[:1]
    tool_only = [{"role": "system", "content": "s"}, {"role": "assistant", "content": None, "tool_calls": []},
                 {"role": "user", "content": "q"}]
    assert with_cache_markers(tool_only)[1] == tool_only[1]


def test_a_role_with_cache_prompt_sends_the_markers_and_one_without_sends_plain_text(tmp_path: Path) -> None:
    assert ModelConfig(model="m", cache_prompt=True).cache_prompt
    engine = Engine(EngineSettings(), ResponseCache(tmp_path, "off"), PriceTable())
    messages = judge_messages(METRIC, transcript("hi", "Where to?"))
    plain = engine.request_body(Endpoint("m", None), messages, None, None)
    marked = engine.request_body(Endpoint("m", None, cache_prompt=True), messages, None, None)
    assert plain["messages"] == messages
    assert marked["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral"}
    assert marked["messages"][-1] == messages[-1]
