"""What goes into every request, cache entry and summary is bounded whatever the labels, servers or
spans say: contrast examples in judge requests, model names read from spans in the cost note."""

from __future__ import annotations

import json

import pytest

from pytest_evalbench.formats.results import Message
from pytest_evalbench.formats.spec import Metric
from pytest_evalbench.kinds import tools
from pytest_evalbench.kinds.metric_judge import CONTRAST_CHARS, Example, judge_messages, pick_contrast
from pytest_evalbench.llm.costs import PriceTable
from pytest_evalbench.llm.types import EngineStats
from pytest_evalbench.render.summary import cost_view

ASKS = Metric(id="m01", name="Asks", type="positive", definition="The assistant asks a clarifying question.",
              examples=["What is your budget?"])


def test_a_judge_request_carries_bounded_contrast_examples() -> None:
    """Two labelled examples of 4.5 MB each (9 MB of labels): every judge request of the metric, and so
    every cache entry, carried both whole."""
    huge = [Message(role="user", content="plan my trip"), Message(role="assistant", content="x" * 4_500_000)]
    examples = [Example(2, huge, True, "n" * 1_000_000), Example(3, huge, False, None), Example(4, huge, True, None)]
    transcript = [Message(role="user", content="hi"), Message(role="assistant", content="Where to?")]
    messages = judge_messages(ASKS, transcript, "contrast", pick_contrast(examples))
    size = len(json.dumps(messages))
    assert len(messages) == 6 and size < 3 * CONTRAST_CHARS + 10_000, size
    assert "[evalbench: contrast example truncated from " in messages[1]["content"]
    assert messages[-1]["content"].endswith(judge_messages(ASKS, transcript, "plain")[-1]["content"][-200:])


def test_the_cost_note_names_a_bounded_number_of_unpriced_models() -> None:
    """An app's spans named 10,000 models of 4,000 characters: the note was one 780 KB line."""
    prices = PriceTable()
    for index in range(10_000):
        prices.cost(f"model-{index:05d}-" + "m" * 3_990, 10, 10)
    stats = EngineStats(requests=1, unpriced=prices.unpriced)
    note = cost_view(stats).note
    assert len(note) < 700, len(note)
    assert "no price for model-" in note and " more models (counted as $0" in note
    assert len(stats.unpriced) <= 100  # what a worker hands the controller


otel = pytest.importorskip("opentelemetry.sdk.trace", reason="the [agents] extra is not installed")


def test_a_model_name_read_from_a_span_is_bounded() -> None:
    provider = otel.TracerProvider()
    collector = tools.SpanCollector()

    class Collect(otel.SpanProcessor):  # type: ignore[misc]
        def on_end(self, span: object) -> None:
            collector.add(span)

    provider.add_span_processor(Collect())
    with provider.get_tracer("t").start_as_current_span("chat") as span:
        span.set_attributes({"gen_ai.operation.name": "chat", "gen_ai.request.model": "m" * 100_000,
                             "gen_ai.usage.input_tokens": 1, "gen_ai.usage.output_tokens": 1})
    traced = tools.read_spans(collector)
    assert traced.model_calls and len(traced.model_calls[0].model or "") <= tools.MAX_MODEL_CHARS
